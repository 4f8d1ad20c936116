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
// 7 runs. A decision may not depend on how fast klock reads
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
	if !harness.LSM() && !harness.CtimeHooks() {
		// No program names the inode a chmod by name changed (no ctime
		// tracepoints, no trampolines for the fentry fallback): the name
		// is looked up after the fact, and the rename has moved it by
		// then. Strict mode fails closed (a false kill, not an escape).
		if !o.Res.Killed {
			t.Fatalf("kernel that cannot name a chmod's inode: want the strict session killed (the name cannot be verified)\n%s", o.Dump())
		}
		return
	}
	o.AssertClean(t, 0)
	if o.Probe[step] != "ok" {
		t.Fatalf("probe %s = %q, want ok\n%s", step, o.Probe[step], o.Dump())
	}
}

// TestProbingAnAbsentSocketIsNoViolation: programs probe for optional
// sockets (a logging daemon's, a name service cache's) and carry on when
// nothing is there. The cgroup AF_UNIX hooks decide by name before the
// kernel looks it up, so such a probe was refused with EPERM and killed a
// strict session for reaching nothing. A connect or send to an undeclared
// path where no socket exists is a failed attempt on nothing, as an open
// of a missing file is; one to an existing socket still kills
// (test/escape's unix rows).
func TestProbingAnAbsentSocketIsNoViolation(t *testing.T) {
	w := harness.NewWorld(t)
	sock := w.O("no-such.sock")
	steps := []string{"unix:" + sock, "unixsendto:" + sock}
	o := w.Run(harness.Spec{Intents: harness.ProbeIntents(), Command: append([]string{harness.Probe}, steps...)})
	o.AssertClean(t, 0)
	for _, s := range steps {
		if got := o.Probe[s]; got != "ENOENT" && got != "EPERM" {
			t.Errorf("probe %s = %q, want it refused or not found", s, got)
		}
	}
}
