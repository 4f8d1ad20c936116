//go:build linux

package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A masked directory is out of reach even under MUTATES/DELETES of the whole
// workdir: the agent can neither read klock's state nor change or remove it.
func TestMaskHidesKlockState(t *testing.T) {
	wd := agentDir(t)
	state := filepath.Join(wd, ".klock")
	writeAgentFile(t, filepath.Join(state, "backups", "b1", "journal"), "precious")
	rs := compile(t, wd, "CONSUMES FILE:${workdir}/**", "MUTATES FILE:${workdir}/**", "DELETES FILE:${workdir}/**",
		"PROVIDES FILE:${workdir}/**", "RENAMES FILE:${workdir}/**", "PROVIDES PROC:/usr/bin/dash", "PROVIDES PROC:/usr/bin/rm",
		"PROVIDES PROC:/usr/bin/mv", "PROVIDES PROC:/usr/bin/cat", "PROVIDES PROC:/usr/bin/ls")
	r := run(t, Spec{Ruleset: rs, Dir: wd, Mask: []string{state}, Env: []string{"PATH=/usr/bin:/bin"}, NewNetNS: true,
		Args: []string{"/bin/sh", "-c", `
ls -A .klock >/dev/null 2>&1 && echo listed
cat .klock/backups/b1/journal 2>/dev/null && echo read
echo x > .klock/new 2>/dev/null && echo wrote
rm -rf .klock 2>/dev/null; [ -d .klock ] || echo removed
mv .klock moved 2>/dev/null && echo moved
echo done`}})
	if strings.TrimSpace(r.stdout) != "done" {
		t.Fatalf("agent reached the masked directory:\n%s\nstderr: %s", r.stdout, r.stderr)
	}
	got, err := os.ReadFile(filepath.Join(state, "backups", "b1", "journal"))
	if err != nil || string(got) != "precious" {
		t.Fatalf("klock state changed: %q %v", got, err)
	}
}
