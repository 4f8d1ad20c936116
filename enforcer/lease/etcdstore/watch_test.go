package etcdstore

import (
	"context"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
)

// A host's event stream carries every host's grants and frees: another
// host's release shows as Released, and this host's holder's lease
// revoked from another host shows as Revoked.
func TestEventsAcrossHosts(t *testing.T) {
	_, a, b := twoHosts(t, 1)
	ctx := context.Background()
	events, stop := a.Subscribe(64)
	defer stop()

	hb := lease.Holder{Agent: "ag", Session: "on-b"}
	if d, err := b.Acquire(ctx, lease.Request{Holder: hb, Claims: []lease.Claim{claim(t, "MUTATES FILE:/repo/src/**")}}); err != nil || d.Outcome != lease.Granted {
		t.Fatal(d, err)
	}
	if _, err := b.Release(ctx, hb); err != nil {
		t.Fatal(err)
	}
	ha := lease.Holder{Agent: "ag", Session: "on-a"}
	if d, err := a.Acquire(ctx, lease.Request{Holder: ha, Claims: []lease.Claim{claim(t, "MUTATES FILE:/repo/docs/**")}}); err != nil || d.Outcome != lease.Granted {
		t.Fatal(d, err)
	}
	if n, err := b.Revoke(ctx, "on-a"); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	want := []struct {
		typ     lease.EventType
		session string
		host    string
		state   lease.State
	}{
		{lease.LeaseGranted, "on-b", "hostB", lease.Active},
		{lease.LeaseFreed, "on-b", "hostB", lease.Released},
		{lease.LeaseGranted, "on-a", "hostA", lease.Active},
		{lease.LeaseFreed, "on-a", "hostA", lease.Revoked},
	}
	for i, w := range want {
		select {
		case e := <-events:
			if e.Type != w.typ || e.Lease.Holder.Session != w.session || e.Lease.Host != w.host || e.Lease.State != w.state || e.Lease.Fence == 0 {
				t.Fatalf("event %d: %s %s host %s %v fence %d, want %+v", i, e.Type, e.Lease.Holder.Session, e.Lease.Host, e.Lease.State, e.Lease.Fence, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d (%+v) never came", i, w)
		}
	}
}
