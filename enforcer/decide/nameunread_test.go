package decide

import (
	"syscall"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// TestNameUnread: an operation whose name klock could not read is allowed
// without one only where the wall lets through nothing undeclared like it
// (WithExactWall), or when it failed without the wall and so changed
// nothing; anywhere else it is judged on its empty name: a violation.
func TestNameUnread(t *testing.T) {
	unread := func(errno syscall.Errno, blocked bool) event.Event {
		ev := fileEv(policy.Provides, "", "mkdirat")
		ev.NameUnread, ev.Errno, ev.Blocked = true, int32(errno), blocked
		return ev
	}
	exact := func(ev event.Event) bool { return ev.Triple.Predicate == policy.Provides }
	for _, c := range []struct {
		name   string
		opts   []Option
		ev     event.Event
		want   Action
		walled bool
	}{
		{"made, wall exact", []Option{WithExactWall(exact)}, unread(0, false), ActionAllow, true},
		{"made, no exact wall", nil, unread(0, false), ActionKill, false},
		{"made, wall exact for another predicate", []Option{WithExactWall(func(event.Event) bool { return false })}, unread(0, false), ActionKill, false},
		{"found there (EEXIST)", nil, unread(syscall.EEXIST, false), ActionAllow, false},
		{"refused by a wall", []Option{WithExactWall(exact)}, unread(syscall.EACCES, true), ActionKill, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := New(compile(t, manifest(t, "strict", "none", repoIntents...)), policy.ModeStrict, c.opts...)
			v := e.Observe(c.ev)
			if v.Action != c.want || v.WallExact != c.walled {
				t.Fatalf("verdict %+v, want action %v, WallExact %v", v, c.want, c.walled)
			}
			if c.walled {
				r := e.Records()
				if len(r.Observed) != 1 || !r.Observed[0].WallExact || r.Observed[0].Violation {
					t.Fatalf("observed %+v, want one WallExact observation", r.Observed)
				}
			}
		})
	}
}
