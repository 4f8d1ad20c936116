package vlog

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/policy"
)

// A permissive amendment another session's lease refused: the log names
// the lease, its holder and object, the headline says the session was not
// amended, and the file keeps it.
func TestLeaseDeniedInLog(t *testing.T) {
	m, rs := compiled(t)
	held := decide.LeaseConflict{ID: "l-0123", Agent: "coder-02", Session: "s-coder", Lease: "MUTATES FILE:/etc/**"}
	e := decide.New(rs, policy.ModePermissive, decide.WithAmendGate(func(r decide.AmendRequest) decide.AmendAnswer {
		return decide.AmendAnswer{Why: r.Intent.String() + " conflicts with session s-coder's lease", Conflicts: []decide.LeaseConflict{held}}
	}))
	e.Observe(ev(policy.Mutates, "/etc/hosts", 2, true))
	l := New(Session{ID: "s-1", Agent: m.Agent.ID, Mode: policy.ModePermissive, Start: t0, Backends: backends})
	l.AddRecords(e.Records())
	l.Finish(t0.Add(4*time.Second), Exit{Code: ExitCode(0)}, nil)

	if l.Verdict != VerdictViolation || l.Summary != "VIOLATION (blocked, 1 amendment denied: another session holds the lease)" {
		t.Fatalf("headline %q / %q", l.Verdict, l.Summary)
	}
	if len(l.Amendments) != 0 || len(l.Violations) != 1 {
		t.Fatalf("amendments %+v violations %+v", l.Amendments, l.Violations)
	}
	v := l.Violations[0]
	if v.Action != ActionLeaseDenied || v.Lease != "" || !strings.Contains(v.LeaseError, "s-coder") ||
		len(v.LeaseConflicts) != 1 || v.LeaseConflicts[0] != (LeaseConflict{ID: "l-0123", Session: "s-coder", Agent: "coder-02", Lease: "MUTATES FILE:/etc/**"}) {
		t.Fatalf("violation %+v", v)
	}
	var buf bytes.Buffer
	if err := Render(&buf, l, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"blocked by the kernel → violation-lease-denied",
		"not amended: MUTATES FILE:/etc/hosts conflicts with session s-coder's lease",
		"held by session s-coder (agent coder-02): MUTATES FILE:/etc/**  [l-0123]",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("render lacks %q\n%s", want, buf.String())
		}
	}
	p, err := l.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	back, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if b := back.Violations[0]; b.LeaseError != v.LeaseError || len(b.LeaseConflicts) != 1 || b.LeaseConflicts[0] != v.LeaseConflicts[0] {
		t.Fatalf("read back %+v", b)
	}

	// Not blocked (a detect-only backend): the change happened in the
	// other session's scope.
	e = decide.New(rs, policy.ModePermissive, decide.WithAmendGate(func(decide.AmendRequest) decide.AmendAnswer {
		return decide.AmendAnswer{Why: "held", Conflicts: []decide.LeaseConflict{held}}
	}))
	e.Observe(ev(policy.Mutates, "/etc/hosts", 2, false))
	l = New(Session{ID: "s-2", Agent: m.Agent.ID, Mode: policy.ModePermissive, Start: t0, Backends: backends})
	l.AddRecords(e.Records())
	l.Finish(t0.Add(4*time.Second), Exit{Code: ExitCode(0)}, nil)
	if l.Summary != "VIOLATION (detected after the effect, 1 amendment denied: another session holds the lease)" {
		t.Fatalf("detected: %q", l.Summary)
	}
}
