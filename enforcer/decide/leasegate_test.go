package decide

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/policy"
)

func holdLease(t *testing.T, tb *lease.Table, h lease.Holder, intent string) lease.Lease {
	t.Helper()
	in, err := policy.ParseIntent(intent)
	if err != nil {
		t.Fatal(err)
	}
	c, ok, why := lease.FromIntent(in)
	if !ok {
		t.Fatal(why)
	}
	d, err := tb.Acquire(context.Background(), lease.Request{Holder: h, Claims: []lease.Claim{c}})
	if err != nil || d.Outcome != lease.Granted {
		t.Fatalf("acquire %s: %+v %v", intent, d, err)
	}
	return d.Lease(0)
}

// An amendment that conflicts with another session's lease is not made:
// the violation names the lease, its holder and object, a refused
// operation stays refused (the retry is a violation again), and once the
// other session releases, the same amendment is granted and held as this
// session's lease.
func TestAmendmentRespectsOthersLeases(t *testing.T) {
	ctx := context.Background()
	tb := lease.NewTable()
	other := lease.Holder{Agent: "coder", Session: "s-other"}
	me := lease.Holder{Agent: "test-agent", Session: "s-me"}
	held := holdLease(t, tb, other, "MUTATES FILE:/srv/repo/src/**")

	e := New(compile(t, manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")), policy.ModePermissive,
		WithAmendGate(LeaseGate(LeaseGateOptions{Store: tb, Holder: me})))
	ev := fileEv(policy.Mutates, "/srv/repo/src/a.go", "openat")
	ev.Source, ev.Blocked, ev.Errno = event.SourceLSM, true, 1

	v := e.Observe(ev)
	if v.Action != ActionLeaseDenied || v.Lease != nil || !v.Blocked {
		t.Fatalf("conflicting amendment: %+v", v)
	}
	for _, want := range []string{"s-other", "coder", "MUTATES FILE:/srv/repo/src/**", held.ID} {
		if !strings.Contains(v.LeaseError, want) {
			t.Errorf("LeaseError %q does not name %s", v.LeaseError, want)
		}
	}
	if d := e.rs.Allows(ev.Triple); d.Allowed {
		t.Fatal("the scope grew although the lease was not granted")
	}
	r := e.Records()
	if len(r.Amendments) != 0 || len(r.Violations) != 1 {
		t.Fatalf("amendments %d violations %d", len(r.Amendments), len(r.Violations))
	}
	vr := r.Violations[0]
	if vr.Action != ActionLeaseDenied || vr.LeaseError != v.LeaseError || len(vr.Conflicts) != 1 ||
		vr.Conflicts[0] != (LeaseConflict{ID: held.ID, Agent: "coder", Session: "s-other", Lease: "MUTATES FILE:/srv/repo/src/**"}) {
		t.Fatalf("violation record %+v", vr)
	}
	if ls, _ := tb.List(ctx, lease.Filter{Session: "s-me"}); len(ls) != 0 {
		t.Fatalf("a denied amendment holds leases: %+v", ls)
	}
	// The retry of a refused operation is refused again (nothing widened).
	if v := e.Observe(ev); v.Action != ActionLeaseDenied {
		t.Fatalf("retry: %s", v.Action)
	}

	// The other session ends: the amendment is granted and held.
	if n, _ := tb.Release(ctx, other); n != 1 {
		t.Fatalf("released %d", n)
	}
	v = e.Observe(ev)
	if v.Action != ActionBlocked || v.Lease == nil || v.Lease.String() != "MUTATES FILE:/srv/repo/src/a.go" {
		t.Fatalf("after release: %+v", v)
	}
	ls, _ := tb.List(ctx, lease.Filter{Session: "s-me"})
	if len(ls) != 1 || ls[0].Holder != me || ls[0].Predicate != policy.Mutates || ls[0].Object != "FILE:/srv/repo/src/a.go" {
		t.Fatalf("held after the amendment: %+v", ls)
	}
	// The session's own lease does not conflict with a later amendment of
	// its own (re-entrant), and another session now conflicts with it.
	if v := e.Observe(fileEv(policy.Deletes, "/srv/repo/src/a.go", "unlinkat")); v.Action != ActionAmended {
		t.Fatalf("own overlapping amendment: %+v", v)
	}
	in, _ := policy.ParseIntent("MUTATES FILE:/srv/repo/src/**")
	c, _, _ := lease.FromIntent(in)
	if d, _ := tb.Acquire(ctx, lease.Request{Holder: other, Claims: []lease.Claim{c}}); d.Outcome == lease.Granted {
		t.Fatal("another session was granted what an amendment holds")
	}
	// Released with the session's other leases.
	if n, _ := tb.Release(ctx, me); n != 2 {
		t.Fatalf("session release freed %d amendment leases, want 2", n)
	}
}

// What nothing leases (an exec) is amended without a lease; a failing
// Before (the backup of the path) refuses the amendment and gives the
// lease back.
func TestLeaseGateUnleasedAndBefore(t *testing.T) {
	ctx := context.Background()
	tb := lease.NewTable()
	me := lease.Holder{Agent: "test-agent", Session: "s-me"}
	var asked []AmendRequest
	fail := errors.New("disk full")
	e := New(compile(t, manifest(t, "permissive", "none")), policy.ModePermissive,
		WithAmendGate(LeaseGate(LeaseGateOptions{Store: tb, Holder: me, Before: func(r AmendRequest) error {
			asked = append(asked, r)
			if r.Triple.Type == policy.ObjFile {
				return fail
			}
			return nil
		}})))
	if v := e.Observe(execEv("/usr/bin/git")); v.Action != ActionAmended || v.Lease == nil {
		t.Fatalf("exec: %+v", v)
	}
	if ls, _ := tb.List(ctx, lease.Filter{}); len(ls) != 0 {
		t.Fatalf("an exec was leased: %+v", ls)
	}
	ev := fileEv(policy.Mutates, "/etc/hosts", "openat")
	ev.Blocked, ev.Source = true, event.SourceLSM
	v := e.Observe(ev)
	if v.Action != ActionLeaseDenied || !strings.Contains(v.LeaseError, "disk full") {
		t.Fatalf("failed backup: %+v", v)
	}
	if ls, _ := tb.List(ctx, lease.Filter{}); len(ls) != 0 {
		t.Fatalf("the lease of a refused amendment is still held: %+v", ls)
	}
	last := asked[len(asked)-1]
	if !last.Blocked || last.Source != event.SourceLSM || last.Intent.String() != "MUTATES FILE:/etc/hosts" {
		t.Fatalf("request %+v", last)
	}
}

// A strict session never asks the gate: a violation kills.
func TestStrictNeverAsksTheGate(t *testing.T) {
	e := New(compile(t, manifest(t, "strict", "none")), policy.ModeStrict,
		WithAmendGate(func(AmendRequest) AmendAnswer { t.Fatal("gate asked in strict mode"); return AmendAnswer{} }))
	if v := e.Observe(fileEv(policy.Mutates, "/etc/hosts", "openat")); v.Action != ActionKill {
		t.Fatalf("%s", v.Action)
	}
}
