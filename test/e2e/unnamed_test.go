package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/klocklabs/klock/test/internal/harness"
)

// TestUnnamedFileIsTheSessions: a file with no name left (made, then
// unlinked; or O_TMPFILE) that the agent truncates, chmods or retimes
// through its fd. pytest's default output capture does this, and a strict
// session was killed with "Agent attempted MUTATES on  but declared
// nothing there" (issue 18 B): no scope is about such a file, since
// nothing outside the process reaches it. Giving it a name again is
// judged as any creation.
func TestUnnamedFileIsTheSessions(t *testing.T) {
	// Debian's python3, not whatever python3 comes first on PATH.
	py := "/usr/bin/python3"
	if _, err := exec.LookPath(py); err != nil {
		t.Fatalf("%s: %v (scripts/deps.sh installs python3)", py, err)
	}
	w := harness.NewWorld(t)
	tmp := w.W("tmp")
	w.Dir(tmp)
	intents := []string{"CONSUMES FILE:" + w.Workdir + "/**", "PROVIDES FILE:" + tmp + "/**", "DELETES FILE:" + tmp + "/**",
		"PROVIDES PROC:" + harness.Real(t, py), "CONSUMES FILE:/usr/lib/**"}
	script := `
import os, tempfile
fd, p = tempfile.mkstemp()
os.unlink(p)
os.write(fd, b"x")
os.ftruncate(fd, 0)
os.fchmod(fd, 0o600)
os.utime(fd)
f = tempfile.TemporaryFile()
f.write(b"y"); f.truncate(0)
os.fchmod(f.fileno(), 0o640)
print("unnamed ok")
`
	o := w.Run(harness.Spec{Intents: intents, Command: []string{py, "-c", script}, Env: []string{"TMPDIR=" + tmp}})
	o.AssertClean(t, 0)
	if !strings.Contains(o.Stdout, "unnamed ok") {
		t.Fatalf("the script did not finish: %q\n%s", o.Stdout, o.Dump())
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
