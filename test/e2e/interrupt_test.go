//go:build linux

package e2e

import (
	"bufio"
	"context"
	"os"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestInterruptKeepsPermissiveWork: Ctrl-C in a real session
// whose agent writes a file and then waits is ended from outside (its
// context, as klock run's signal handler does). Permissive mode keeps the
// agent's work unless asked (RollbackOnInterrupt); strict mode rolls back.
func TestInterruptKeepsPermissiveWork(t *testing.T) {
	for _, c := range []struct {
		name       string
		mode       policy.Mode
		onInt      bool
		wantKept   bool
		wantLogged bool
	}{
		{"permissive keeps", policy.ModePermissive, false, true, false},
		{"permissive rolls back when asked", policy.ModePermissive, true, false, true},
		{"strict rolls back", policy.ModeStrict, false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := harness.NewWorld(t)
			work := w.W("learned.txt")
			m, err := policy.Parse("m.yaml", []byte(harness.ManifestYAML(w.Workdir, c.mode, []string{
				"PROVIDES PROC:" + dash(t), "PROVIDES PROC:/usr/bin/sleep", "PROVIDES FILE:" + w.Workdir + "/**"})))
			if err != nil {
				t.Fatal(err)
			}
			r, wr, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ctx, interrupt := context.WithCancel(context.Background())
			defer interrupt()
			type outcome struct {
				res *session.Result
				err error
			}
			done := make(chan outcome, 1)
			started := make(chan struct{})
			go func() { // session.Run, not w.Run: no t.Fatal off the test's goroutine
				res, err := session.Run(ctx, session.Options{Manifest: m, Command: []string{"/bin/sh", "-c", "echo work > " + work + "; echo up; sleep 30"},
					Backend: harness.Backend(), User: &launch.Credential{UID: harness.AgentUID, GID: harness.AgentGID},
					Snapshot: session.Backup(nil), Stdout: wr, RollbackOnInterrupt: c.onInt,
					Started: func(int) { close(started) }})
				wr.Close()
				done <- outcome{res, err}
			}()
			if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
				t.Fatalf("the session did not start: %v", err)
			}
			<-started // a cancel before this is a session that never started
			interrupt()
			var o outcome
			select {
			case o = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the interrupted session did not end")
			}
			if o.err != nil {
				t.Fatal(o.err)
			}
			if !o.res.Killed || !o.res.Interrupted {
				t.Fatalf("killed %v interrupted %v (agent: %v, %s), want an interruption", o.res.Killed, o.res.Interrupted, o.res.Exit, o.res.Reason)
			}
			if kept := w.Exists(work); kept != c.wantKept {
				t.Errorf("after the interrupt %s exists: %v, want %v", work, kept, c.wantKept)
			}
			if logged := len(o.res.Log.Rollback) > 0; logged != c.wantLogged {
				t.Errorf("the log lists a rollback: %v, want %v (%+v)", logged, c.wantLogged, o.res.Log.Rollback)
			}
		})
	}
}
