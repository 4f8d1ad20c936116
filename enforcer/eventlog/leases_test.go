package eventlog

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/policy"
)

// TestLeases: the decorator over a real host store records a grant, a
// conflict (wait or die, naming the holder) and a revoke, each valid
// against the schema, and keeps the store's Awaiter.
func TestLeases(t *testing.T) {
	host, err := lease.OpenHost(filepath.Join(t.TempDir(), "leases"))
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	h := NewHub("test", 0)
	rd := h.Subscribe(Filter{}, true, 0)
	store := Leases(host, h)
	if _, ok := store.(lease.Awaiter); !ok {
		t.Fatal("the decorator hides the store's Awaiter")
	}
	if _, ok := store.(subscriber); !ok {
		t.Fatal("the decorator hides the store's event stream")
	}
	res, err := lease.ParseResource("FILE:/srv/repo/**")
	if err != nil {
		t.Fatal(err)
	}
	claim := []lease.Claim{{Predicate: policy.Mutates, Resource: res, Intent: "MUTATES FILE:/srv/repo/**"}}
	ctx := context.Background()
	a := lease.Holder{Tenant: "uid:1", Agent: "a", Session: "sa"}
	b := lease.Holder{Tenant: "uid:2", Agent: "b", Session: "sb"}
	if d, err := store.Acquire(ctx, lease.Request{Holder: a, Claims: claim}); err != nil || d.Outcome != lease.Granted {
		t.Fatalf("%v %v", d, err)
	}
	if d, err := store.Acquire(ctx, lease.Request{Holder: b, Claims: claim}); err != nil || d.Outcome == lease.Granted {
		t.Fatalf("%v %v", d, err)
	}
	if n, err := store.Revoke(ctx, "sa"); err != nil || n != 1 {
		t.Fatalf("revoke %d %v", n, err)
	}
	h.Close()
	var kinds []Kind
	for {
		r, err := rd.Next(ctx)
		if err != nil {
			break
		}
		kinds = append(kinds, r.Kind)
		line, _ := json.Marshal(r)
		if err := Validate(line); err != nil {
			t.Error(err)
		}
		switch r.Kind {
		case KindLeaseGrant:
			if r.Owner != "uid:1" || r.Session != "sa" || r.Lease.Count != 1 || !strings.HasSuffix(r.Lease.Leases[0], " MUTATES FILE:/srv/repo/**") {
				t.Errorf("grant %s", line)
			}
		case KindLeaseWait, KindLeaseDie:
			if r.Session != "sb" || r.Lease.Holder != "sa" {
				t.Errorf("conflict %s", line)
			}
		case KindLeaseRevoke:
			if r.Lease.Count != 1 {
				t.Errorf("revoke %s", line)
			}
		}
	}
	if len(kinds) != 3 || kinds[0] != KindLeaseGrant || kinds[2] != KindLeaseRevoke {
		t.Errorf("kinds %v", kinds)
	}
}
