//go:build linux

package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/klocklabs/klock/test/internal/harness"
)

// TestProcessSubstitutionIsClean: bash's <(...) hands the agent /dev/fd/63,
// a link into its own /proc/self/fd. The observer once followed that link
// in its own process and named klock's descriptor 63 (a BPF program:
// "CONSUMES anon_inode:bpf-prog"), killing every strict run of a CLI that
// uses process substitution (Codex's shell tool does) in a session with a
// NET intent, where klock holds more descriptors. It is the agent's own
// pipe: CLEAN. The probe does what bash does (a pipe read back through
// /dev/fd/N, and through /proc/self/fd/N), so this runs where bash is not
// installed too (the VM).
func TestProcessSubstitutionIsClean(t *testing.T) {
	for _, via := range []string{"dev", "proc"} {
		t.Run(via, func(t *testing.T) {
			if _, err := os.Stat("/dev/fd"); err != nil && via == "dev" {
				t.Skipf("no /dev/fd on this system (%v): /proc/self/fd is the same door", err)
			}
			w := harness.NewWorld(t)
			o := w.Run(harness.Spec{
				Intents: append(harness.ProbeIntents(), "CONSUMES NET:127.0.0.1:9/tcp"),
				Command: []string{harness.Probe, "procsub:" + via},
			})
			o.AssertClean(t, 0)
			if got := o.Probe["procsub:"+via]; got != "ok" {
				t.Fatalf("procsub = %q\n%s", got, o.Dump())
			}
			for _, ob := range o.Log.Observed {
				if strings.Contains(ob.Triple, "anon_inode") || strings.Contains(ob.Triple, "pipe:") {
					t.Errorf("observed %s: a descriptor named in the wrong process", ob.Triple)
				}
			}
		})
	}
}
