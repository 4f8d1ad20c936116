package e2e

import (
	"strings"
	"testing"

	"github.com/klocklabs/klock/test/internal/harness"
)

// TestUnnamedFileIsTheSessions: a file with no name left (made, then
// unlinked; or O_TMPFILE) that the agent writes, truncates, chmods and
// retimes through its fd. pytest's default output capture does this, and a
// strict session was killed with "Agent attempted MUTATES on  but declared
// nothing there": no scope is about such a file, since
// nothing outside the process reaches it. Giving it a name again is judged
// as any creation.
func TestUnnamedFileIsTheSessions(t *testing.T) {
	w := harness.NewWorld(t)
	tmp := w.W("tmp")
	w.Dir(tmp)
	intents := append([]string{"CONSUMES FILE:" + w.Workdir + "/**", "PROVIDES FILE:" + tmp + "/**", "DELETES FILE:" + tmp + "/**"},
		harness.ProbeIntents()...)
	step := "unnamed:" + tmp
	o := w.Run(harness.Spec{Intents: intents, Command: []string{harness.Probe, step}})
	o.AssertClean(t, 0)
	if o.Probe[step] != "ok" {
		t.Fatalf("probe %s = %q, want ok\n%s", step, o.Probe[step], o.Dump())
	}
	var unnamed int
	for _, ob := range o.Log.Observed {
		if strings.HasPrefix(ob.AllowedBy, "a file with no name left") {
			unnamed++
		}
	}
	if !harness.LSM() && unnamed == 0 {
		t.Errorf("no operation on an unnamed file was observed: the test did not test it\n%s", o.Dump())
	}
}
