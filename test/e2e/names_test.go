package e2e

import (
	"testing"

	"github.com/klocklabs/klock/test/internal/harness"
)

// TestMetadataCallKeepsTheNameItUsed: pip writes a temporary file,
// chmods it by name and renames it over its target at once. The chmod was
// named by looking its path up again after the fact, which found the
// target's name once the rename had happened: MUTATES on the target,
// which the manifest does not allow, and a strict session killed in 4 of
// 7 runs (issue 18 B). A decision may not depend on how fast klock reads
// its events: the name is the kernel's, at the call's exit. Many rounds,
// so that the old race shows in most runs.
func TestMetadataCallKeepsTheNameItUsed(t *testing.T) {
	w := harness.NewWorld(t)
	d := w.W("d")
	w.Dir(d)
	intents := append([]string{"CONSUMES FILE:" + w.Workdir + "/**", "PROVIDES FILE:" + d + "/**", "RENAMES FILE:" + d + "/**"},
		harness.ProbeIntents()...)
	step := "chmod-rename:" + d + ">1500"
	o := w.Run(harness.Spec{Intents: intents, Command: []string{harness.Probe, step}})
	o.AssertClean(t, 0)
	if o.Probe[step] != "ok" {
		t.Fatalf("probe %s = %q, want ok\n%s", step, o.Probe[step], o.Dump())
	}
}
