//go:build linux

package e2e

import (
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
// pipe: CLEAN, named /proc/self/fd/63.
func TestProcessSubstitutionIsClean(t *testing.T) {
	bash := harness.Real(t, "/bin/bash")
	cat := harness.Real(t, "/usr/bin/cat")
	w := harness.NewWorld(t)
	o := w.Run(harness.Spec{
		Intents: []string{"PROVIDES PROC:" + bash, "PROVIDES PROC:" + cat, "CONSUMES NET:127.0.0.1:9/tcp"},
		Command: []string{bash, "-c", "cat <(echo from-a-pipe); cat /dev/fd/0 </dev/null"},
	})
	o.AssertClean(t, 0)
	if !strings.Contains(o.Stdout, "from-a-pipe") {
		t.Fatalf("stdout %q", o.Stdout)
	}
	for _, ob := range o.Log.Observed {
		if strings.Contains(ob.Triple, "anon_inode") || strings.Contains(ob.Triple, "pipe:") {
			t.Errorf("observed %s: a descriptor named in the wrong process", ob.Triple)
		}
	}
}
