package e2e

import (
	"strings"
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
	py := "/usr/bin/python3"
	w := harness.NewWorld(t)
	d := w.W("d")
	w.Dir(d)
	intents := []string{"CONSUMES FILE:" + w.Workdir + "/**", "PROVIDES FILE:" + d + "/**", "RENAMES FILE:" + d + "/**",
		"PROVIDES PROC:" + harness.Real(t, py), "CONSUMES FILE:/usr/lib/**"}
	script := `
import os, sys
os.chdir(sys.argv[1])
for i in range(1500):
    t = 'tmp%d' % i
    fd = os.open(t, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b'pip\n'); os.fchmod(fd, 0o644); os.close(fd)
    os.chmod(t, 0o644)
    os.rename(t, 'INSTALLER%d' % i)
print('renamed')
`
	o := w.Run(harness.Spec{Intents: intents, Command: []string{py, "-c", script, d}})
	o.AssertClean(t, 0)
	if !strings.Contains(o.Stdout, "renamed") {
		t.Fatalf("the script did not finish: %q\n%s", o.Stdout, o.Dump())
	}
}
