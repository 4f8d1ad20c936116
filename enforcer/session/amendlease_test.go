//go:build linux

package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

func permissiveRuleset(t *testing.T, workdir string) *policy.Ruleset {
	t.Helper()
	m, err := policy.Parse("m.yaml", fmt.Appendf(nil, `apiVersion: klock/v1
agent: {id: dla-agent}
mode: permissive
workdir: %s
baseline: none
intents: ["CONSUMES FILE:${workdir}/**"]
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.5, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`, workdir))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func refused(p policy.Predicate, path string) event.Event {
	return event.Event{Source: event.SourceLSM, Triple: policy.FileTriple(p, path), PID: 7, Comm: "agent", Syscall: "openat", Blocked: true, Errno: 1}
}

// A permissive bpf-lsm session's amendment lets the agent's retry of a
// refused operation through: its path is added to the backup before the
// amendment is granted, so the rollback restores what the retry changed.
// A conflicting amendment is neither granted nor backed up; an operation
// that already took effect (a detect-only backend) is not backed up (its
// state now is not the one to restore); a wall that does not widen
// (Landlock) keeps refusing, so nothing is backed up for it.
func TestAmendmentBackedUpBeforeGrant(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	work, etc := filepath.Join(dir, "work"), filepath.Join(dir, "etc")
	for _, p := range []string{filepath.Join(work, "a"), filepath.Join(etc, "conf"), filepath.Join(etc, "held"), filepath.Join(etc, "seen"), filepath.Join(etc, "ll")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("before"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rs := permissiveRuleset(t, work)
	snap, err := snapshot.Take(ctx, rs, snapshot.Options{Dir: filepath.Join(dir, "backups"), Session: "s-dla", Scopes: []snapshot.Scope{{Path: work, Tree: true}}})
	if err != nil {
		t.Fatal(err)
	}
	backup := restorer{snap}
	tb := lease.NewTable()
	me := lease.Holder{Agent: "dla-agent", Session: "s-dla"}
	other := lease.Holder{Agent: "coder", Session: "s-coder"}
	in, _ := policy.ParseIntent("MUTATES FILE:" + filepath.Join(etc, "held"))
	c, _, _ := lease.FromIntent(in)
	if d, _ := tb.Acquire(ctx, lease.Request{Holder: other, Claims: []lease.Claim{c}}); d.Outcome != lease.Granted {
		t.Fatal(d)
	}

	eng := decide.New(rs, policy.ModePermissive, decide.WithAmendGate(amendGate(ctx, tb, me, time.Time{}, 0, backup, true)))
	conf := filepath.Join(etc, "conf")
	if v := eng.Observe(refused(policy.Mutates, conf)); v.Action != decide.ActionBlocked || v.Lease == nil {
		t.Fatalf("amendment: %+v", v)
	}
	if known, existed := backup.Existed(conf); !known || !existed {
		t.Fatal("granted before its path was backed up")
	}
	held := filepath.Join(etc, "held")
	if v := eng.Observe(refused(policy.Mutates, held)); v.Action != decide.ActionLeaseDenied {
		t.Fatalf("conflicting amendment: %+v", v)
	}
	if known, _ := backup.Existed(held); known {
		t.Fatal("a denied amendment's path was backed up")
	}
	seen := filepath.Join(etc, "seen")
	tookEffect := refused(policy.Mutates, seen)
	tookEffect.Blocked, tookEffect.Errno, tookEffect.Source = false, 0, event.SourceTracepoint
	if v := eng.Observe(tookEffect); v.Action != decide.ActionAmended {
		t.Fatalf("detected: %+v", v)
	}
	if known, _ := backup.Existed(seen); known {
		t.Fatal("a path changed already was backed up as it is now")
	}

	// The agent's retry goes through (the wall widened) and changes it;
	// the session is rolled back over what it touched.
	retry := refused(policy.Mutates, conf)
	retry.Blocked, retry.Errno = false, 0
	if v := eng.Observe(retry); v.Action != decide.ActionAllow || v.Intent == nil || v.Intent.Origin != "lease" {
		t.Fatalf("retry: %+v", v)
	}
	if err := os.WriteFile(conf, []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The path changed before anyone could back it up is reported, not
	// silently kept.
	ops, err := backup.Restore(ctx, rollbackRoots(work, eng.Records()), nil, Reclaims{})
	if !errors.Is(err, snapshot.ErrIncomplete) || !strings.Contains(err.Error(), seen) {
		t.Fatalf("rollback: %v, want %s reported unrecorded", err, seen)
	}
	if !slices.ContainsFunc(ops, func(op vlog.RollbackOp) bool { return op.Path == conf && op.OK }) {
		t.Fatalf("rollback did not restore %s: %+v", conf, ops)
	}
	if b, _ := os.ReadFile(conf); string(b) != "before" {
		t.Fatalf("%s after the rollback: %q", conf, b)
	}

	// Landlock does not widen: nothing to back up, the lease is held.
	ll := filepath.Join(etc, "ll")
	eng = decide.New(rs, policy.ModePermissive, decide.WithAmendGate(amendGate(ctx, tb, me, time.Time{}, 0, backup, false)))
	ev := refused(policy.Mutates, ll)
	ev.Source = event.SourceLandlock
	if v := eng.Observe(ev); v.Action != decide.ActionBlocked || v.Lease == nil {
		t.Fatalf("landlock amendment: %+v", v)
	}
	if known, _ := backup.Existed(ll); known {
		t.Fatal("backed up for a wall that does not widen")
	}
	// Every amendment lease is the session's: one Release frees them.
	if n, _ := tb.Release(ctx, me); n != 3 {
		t.Fatalf("released %d amendment leases, want 3 (conf, seen, ll)", n)
	}
}
