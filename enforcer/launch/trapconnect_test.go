//go:build linux

package launch

import (
	"bytes"
	"context"
	"testing"

	"github.com/klocklabs/klock/enforcer/looprelay"
	"github.com/klocklabs/klock/internal/testutil"
)

// TestTrapConnect: with Spec.TrapConnect the agent's connect waits on the
// listener Process.ConnectListener hands the caller: answered (here:
// every connect continues), it reaches the kernel and the walls, which
// answer as without the trap (Landlock's EACCES: no port declared); with the listener closed unanswered, the trap
// shows (the kernel fails a trapped call with ENOSYS when no listener is
// left). Without TrapConnect there is no listener.
func TestTrapConnect(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, c := range []struct {
		name         string
		trap, answer bool
		want         string
	}{
		{"answered", true, true, "connect=EACCES\n"},
		{"unanswered", true, false, "connect=ENOSYS\n"},
		{"untrapped", false, false, "connect=EACCES\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := probeSpec(t, "connect")
			var out bytes.Buffer
			s.Group, s.User, s.Stdout, s.TrapConnect = newGroup(t), agentUser(), &out, c.trap
			p, err := Start(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			if l := p.ConnectListener; (l != nil) != c.trap {
				t.Fatalf("trap %v: listener %v", c.trap, l)
			} else if l != nil && c.answer {
				looprelay.Passthrough(l)
			} else if l != nil {
				l.Close()
			}
			if exit, err := p.Wait(); err != nil || exit != (Exit{}) {
				t.Fatalf("probe: %v %v", exit, err)
			}
			if out.String() != c.want {
				t.Errorf("%q, want %q", out.String(), c.want)
			}
		})
	}
}
