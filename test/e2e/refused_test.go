package e2e

import (
	"sync"

	"github.com/klocklabs/klock/enforcer/eventlog"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestRefusedDeclaredOperationIsNotClean: CLEAN means no violation and no
// declared operation refused by klock. A file the manifest declares
// (CONSUMES <W>/later.txt) that someone else makes during the session
// cannot be walled by Landlock (its rules attach to files that exist at
// start, and nothing declared lets the agent make it): the agent's read is
// refused. That is klock's failure, not the agent's: the verdict is
// REFUSED and names the operation, not CLEAN (git's refused
// unlink of .git/HEAD.lock read CLEAN, exit 0). bpf-lsm decides by path
// and lets the read through: CLEAN there.
func TestRefusedDeclaredOperationIsNotClean(t *testing.T) {
	w := harness.NewWorld(t)
	later := w.W("later.txt")
	intents := []string{"PROVIDES PROC:" + dash(t), "PROVIDES PROC:/usr/bin/cat", "PROVIDES PROC:/usr/bin/sleep",
		"CONSUMES FILE:" + later}
	started := startSignal{ch: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Only once the agent runs (its wall is built): a file made
		// before would be walled like any other.
		select {
		case <-started.ch:
		case <-time.After(30 * time.Second):
		}
		w.File(later, "made by someone else\n")
	}()
	o := w.Run(harness.Spec{Intents: intents, Events: &started, Command: []string{"/bin/sh", "-c",
		`i=0; while [ ! -e "$L" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; cat "$L"`}, Env: []string{"L=" + later}})
	<-done
	if harness.LSM() {
		o.AssertClean(t, 0)
		return
	}
	if o.Res.Killed || len(o.Log.Violations) != 0 {
		t.Fatalf("a refused declared operation is not the agent's violation\n%s", o.Dump())
	}
	if o.Log.Verdict != vlog.VerdictRefused || !strings.Contains(o.Log.Summary, "klock's wall refused 1 operation") {
		t.Fatalf("verdict %q (%s), want REFUSED naming the operation\n%s", o.Log.Verdict, o.Log.Summary, o.Dump())
	}
	r := o.Log.Refused[0]
	if r.Triple != "CONSUMES FILE:"+later || r.AllowedBy != "CONSUMES FILE:"+later {
		t.Errorf("refused %+v, want CONSUMES FILE:%s declared by itself", r, later)
	}
	// The rendered log says what happened and what to do.
	var b strings.Builder
	if err := vlog.Render(&b, o.Log, vlog.RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Refused by klock's wall although declared") {
		t.Errorf("the rendered log has no refusal section:\n%s", b.String())
	}
}

// startSignal is an event sink that closes ch when the session says its
// agent runs.
type startSignal struct {
	ch   chan struct{}
	once sync.Once
}

func (s *startSignal) Publish(r eventlog.Record) {
	if r.Kind == eventlog.KindSessionStart {
		s.once.Do(func() { close(s.ch) })
	}
}

func (s *startSignal) WantsObserved() bool { return false }
