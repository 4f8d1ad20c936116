package e2e

import (
	"testing"

	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestReplaceableDirectoryIsDetected: rw/ may be removed and made again
// (MUTATES, PROVIDES, DELETES, RENAMES rw/**), so a Landlock rule of its
// own would stay with the first rw/ and the agent could not use the one
// it makes (make clean && make). The rule goes on the workdir instead,
// and the observer decides there: the agent replaces rw/ and works in it,
// and a write to a CONSUMES-only file beside it, which the wider wall lets
// through on Landlock, is still a violation: killed and rolled back there
// (blocked by bpf-lsm, which decides by path).
func TestReplaceableDirectoryIsDetected(t *testing.T) {
	w := harness.NewWorld(t)
	w.File(w.W("ro.txt"), "read-only\n")
	w.File(w.W("rw", "old.txt"), "old\n")
	rw := w.W("rw") + "/**"
	intents := []string{"CONSUMES FILE:" + w.Workdir + "/**",
		"MUTATES FILE:" + rw, "PROVIDES FILE:" + rw, "DELETES FILE:" + rw, "RENAMES FILE:" + rw,
		"PROVIDES PROC:" + dash(t), "PROVIDES PROC:/usr/bin/rm", "PROVIDES PROC:/usr/bin/mkdir", "PROVIDES PROC:/usr/bin/cat"}
	o := w.Run(harness.Spec{Intents: intents, Command: []string{"/bin/sh", "-c",
		`rm -r "$W/rw" && mkdir "$W/rw" && echo new > "$W/rw/new.txt" && echo more >> "$W/rw/new.txt" && cat "$W/rw/new.txt"`},
		Env: []string{"W=" + w.Workdir}})
	o.AssertClean(t, 0)
	if got := w.Content(w.W("rw", "new.txt")); got != "new\nmore\n" {
		t.Errorf("rw/new.txt = %q, want the agent's two writes in the rw/ it made\n%s", got, o.Dump())
	}

	w2 := harness.NewWorld(t)
	w2.File(w2.W("ro.txt"), "read-only\n")
	w2.Dir(w2.W("rw"))
	rw = w2.W("rw") + "/**"
	intents = append([]string{"CONSUMES FILE:" + w2.Workdir + "/**",
		"MUTATES FILE:" + rw, "PROVIDES FILE:" + rw, "DELETES FILE:" + rw, "RENAMES FILE:" + rw}, harness.ProbeIntents()...)
	write := "write:" + w2.W("ro.txt")
	o = w2.Run(harness.Spec{Intents: intents, Command: []string{harness.Probe, write}})
	tr := policy.FileTriple(policy.Mutates, w2.W("ro.txt"))
	o.AssertKilledFor(t, tr.String(), w2.W("ro.txt"), msg("MUTATES", "FILE:"+w2.W("ro.txt"), o.Declared(t, tr)), harness.LSM())
	if got := w2.Content(w2.W("ro.txt")); got != "read-only\n" {
		t.Errorf("ro.txt = %q after the kill, want it as it was", got)
	}
}
