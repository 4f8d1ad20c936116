package lease

import (
	"context"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
)

func claim(t *testing.T, s string) Claim {
	t.Helper()
	in, err := policy.ParseIntent(s)
	if err != nil {
		t.Fatal(err)
	}
	c, ok, why := FromIntent(in)
	if !ok {
		t.Fatalf("%s: %s", s, why)
	}
	return c
}

func TestWaitDieWholeManifest(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	tb := NewTable(WithClock(func() time.Time { return now }))
	a := Holder{Agent: "a", Session: "s1"}
	b := Holder{Agent: "b", Session: "s2"}
	d, err := tb.Acquire(ctx, Request{Holder: a, Claims: []Claim{claim(t, "MUTATES FILE:/repo/src/**")}, Age: now})
	if err != nil || d.Outcome != Granted {
		t.Fatalf("first: %v %v", d.Outcome, err)
	}
	// Disjoint: granted.
	if d, _ := tb.Acquire(ctx, Request{Holder: b, Claims: []Claim{claim(t, "MUTATES FILE:/repo/docs/**")}, Age: now.Add(time.Second)}); d.Outcome != Granted {
		t.Fatalf("disjoint: %v", d.Outcome)
	}
	c := Holder{Agent: "c", Session: "s3"}
	// Younger overlapping: DIE.
	if d, _ := tb.Acquire(ctx, Request{Holder: c, Claims: []Claim{claim(t, "CONSUMES FILE:/repo/src/a.go")}, Age: now.Add(2 * time.Second)}); d.Outcome != Die || len(d.Conflicts) != 1 {
		t.Fatalf("younger: %+v", d)
	}
	// Older overlapping: WAIT. Equal age: DIE.
	if d, _ := tb.Acquire(ctx, Request{Holder: c, Claims: []Claim{claim(t, "CONSUMES FILE:/repo/src/a.go")}, Age: now.Add(-time.Second)}); d.Outcome != Wait {
		t.Fatalf("older: %v", d.Outcome)
	}
	if d, _ := tb.Acquire(ctx, Request{Holder: c, Claims: []Claim{claim(t, "CONSUMES FILE:/repo/src/a.go")}, Age: now}); d.Outcome != Die {
		t.Fatalf("equal: %v", d.Outcome)
	}
	// Shared reads and PROC never conflict.
	if _, ok, _ := FromIntent(mustIntent(t, "PROVIDES PROC:/usr/bin/sh")); ok {
		t.Fatal("PROC leased")
	}
	// Expiry after TTL + grace frees.
	now = now.Add(DefaultTTL + DefaultGrace + time.Second)
	if d, _ := tb.Acquire(ctx, Request{Holder: c, Claims: []Claim{claim(t, "MUTATES FILE:/repo/**")}}); d.Outcome != Granted {
		t.Fatalf("after expiry: %+v", d)
	}
	if _, err := tb.Heartbeat(ctx, a); err == nil {
		t.Fatal("heartbeat of an expired holder accepted")
	}
}

func mustIntent(t *testing.T, s string) policy.Intent {
	in, err := policy.ParseIntent(s)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestGroupLeadAndMembers: a session leading a group does not conflict
// with its members (the tool calls made for it), members still conflict
// with each other, and a group of another tenant joins nothing.
func TestGroupLeadAndMembers(t *testing.T) {
	ctx := context.Background()
	tb := NewTable()
	lead := Holder{Tenant: "uid:0", Agent: "a", Session: "s1", Group: "run:r", Lead: true}
	call := func(id, tenant string) Holder {
		return Holder{Tenant: tenant, Agent: "a", Session: "tool:x:" + id, Group: "run:r"}
	}
	if d, _ := tb.Acquire(ctx, Request{Holder: lead, Claims: []Claim{claim(t, "MUTATES FILE:/repo/src/**")}}); d.Outcome != Granted {
		t.Fatalf("lead: %v", d.Outcome)
	}
	if d, _ := tb.Acquire(ctx, Request{Holder: call("1", "uid:0"), Claims: []Claim{claim(t, "MUTATES FILE:/repo/**")}}); d.Outcome != Granted {
		t.Fatalf("a call of the lead's run: %+v", d)
	}
	if d, _ := tb.Acquire(ctx, Request{Holder: call("2", "uid:0"), Claims: []Claim{claim(t, "MUTATES FILE:/repo/**")}}); d.Outcome == Granted {
		t.Fatal("two calls of one run changing the same files were both granted")
	}
	if d, _ := tb.Acquire(ctx, Request{Holder: call("3", "uid:1000"), Claims: []Claim{claim(t, "CONSUMES FILE:/repo/src/a")}}); d.Outcome == Granted {
		t.Fatal("another tenant's holder joined the group")
	}
}
