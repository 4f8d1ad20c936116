package etcdstore

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
)

// An age key outlives its holder's release (the holder keeps its age) but
// not for ever: it is bound to an etcd lease of AgeKeep that nothing
// renews.
func TestAgeKeysRunOut(t *testing.T) {
	c, a, _ := twoHosts(t, 1)
	cli := c.Client(t)
	ctx := context.Background()
	h := lease.Holder{Agent: "ag", Session: "aged"}
	if d, err := a.Acquire(ctx, lease.Request{Holder: h, Claims: []lease.Claim{claim(t, "MUTATES FILE:/repo/**")}}); err != nil || d.Outcome != lease.Granted {
		t.Fatal(d, err)
	}
	if _, err := a.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	r, err := cli.Get(ctx, a.ageKey(h))
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the age key after the release: %v %v", r, err)
	}
	if r.Kvs[0].Lease == 0 {
		t.Fatal("the age key is bound to no lease: it would stay in etcd for ever")
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(r.Kvs[0].Lease))
	if err != nil || time.Duration(ttl.TTL)*time.Second < AgeKeep-time.Minute || time.Duration(ttl.TTL)*time.Second > AgeKeep {
		t.Fatalf("the age key's lease: %+v %v, want about %s", ttl, err, AgeKeep)
	}
}
