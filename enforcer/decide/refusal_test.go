package decide

import (
	"syscall"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// TestDeclaredOperationRefusedByTheWall: a declared operation a wall of
// klock's refused is recorded as a Refusal (the verdict cannot be CLEAN);
// one the file's permissions refused, or an undeclared one, is not (issue
// 18: `DELETES FILE:.../.git/HEAD.lock ← DELETES FILE:.../.git/** [1
// blocked]` read CLEAN).
func TestDeclaredOperationRefusedByTheWall(t *testing.T) {
	rs := compile(t, manifest(t, "strict", "none", "DELETES FILE:/srv/repo/.git/**", "CONSUMES FILE:/srv/repo/**"))
	wall := func(ev event.Event, t policy.Triple) bool { return t.Path != "/srv/repo/owned-by-root" }
	e := New(rs, policy.ModeStrict, WithClock(fakeClock()), WithWall(wall))
	refused := event.Event{Triple: policy.FileTriple(policy.Deletes, "/srv/repo/.git/HEAD.lock"), Errno: int32(syscall.EACCES), Blocked: true, Syscall: "unlinkat", Comm: "git"}
	for range 2 {
		if v := e.Observe(refused); v.Action != ActionAllow || v.Violation() || !v.Refused {
			t.Fatalf("a declared operation is not a violation, and the verdict says the wall refused it: %+v", v)
		}
	}
	// Refused by the file's mode, not by the wall.
	if v := e.Observe(event.Event{Triple: policy.FileTriple(policy.Consumes, "/srv/repo/owned-by-root"), Errno: int32(syscall.EACCES), Blocked: true}); v.Refused {
		t.Errorf("a refusal of the file's mode is the wall's: %+v", v)
	}
	// Allowed and done.
	if v := e.Observe(event.Event{Triple: policy.FileTriple(policy.Consumes, "/srv/repo/a.go")}); v.Refused {
		t.Errorf("an allowed operation is a refusal: %+v", v)
	}
	r := e.Records()
	if len(r.Refused) != 1 {
		t.Fatalf("refused %+v, want the one declared unlink", r.Refused)
	}
	got := r.Refused[0]
	if got.Triple != refused.Triple || got.Count != 2 || got.AllowedBy != "DELETES FILE:/srv/repo/.git/**" || got.Comm != "git" {
		t.Errorf("refusal %+v, want the unlink twice, declared by DELETES FILE:/srv/repo/.git/**", got)
	}
	if len(r.Violations) != 0 || r.Kill != nil {
		t.Errorf("a refusal is not the agent's violation: %+v kill %v", r.Violations, r.Kill)
	}
	// Without WithWall nothing is attributed to a wall.
	e = New(rs, policy.ModeStrict)
	e.Observe(refused)
	if n := len(e.Records().Refused); n != 0 {
		t.Errorf("without a wall: %d refusals, want 0", n)
	}
}
