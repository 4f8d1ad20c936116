//go:build linux

package e2e

import (
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestAdoptedContainer: a process klock did not start, adopted while it
// waits (as a container's init in the OCI createRuntime hook), in both
// modes: hook-only (no klock code in the process: bpf-lsm where the kernel
// has it, else the tracepoints detect and kill) and the runtime mode
// (klock-stage2 execs first and puts up the wall the session wrote). A
// declared write is CLEAN; a write outside the scope kills the session and
// the file is restored byte for byte.
func TestAdoptedContainer(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    harness.Adopted
	}{{"hook", harness.Adopted{}}, {"runtime", harness.Adopted{Stage2: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			w := harness.NewWorld(t)
			w.File(w.W("keep.txt"), "original\n")
			intents := []string{"PROVIDES FILE:" + w.W("out.txt"), "MUTATES FILE:" + w.W("out.txt"), "PROVIDES PROC:/usr/bin/*", "PROVIDES PROC:/bin/*"}
			clean := w.Adopt(harness.Spec{Intents: intents, Command: []string{"/bin/sh", "-c", "echo declared > out.txt"}}, tc.a)
			if clean.Log.Verdict != "CLEAN" || clean.Res.Killed {
				t.Fatalf("declared write: verdict %s, killed %v (%s)\n%s", clean.Log.Verdict, clean.Res.Killed, clean.Res.Reason, clean.Dump())
			}
			if got := w.Content(w.W("out.txt")); got != "declared\n" {
				t.Fatalf("out.txt = %q after a CLEAN run\nstderr: %s", got, clean.Stderr)
			}
			hookCanaries(t, clean, tc.a)
			if clean.Log.Container == nil || clean.Log.Container.Mode != map[bool]string{false: "hook", true: "runtime"}[tc.a.Stage2] {
				t.Fatalf("log's container = %+v", clean.Log.Container)
			}
			bad := w.Adopt(harness.Spec{Intents: intents, Command: []string{"/bin/sh", "-c", "echo changed > keep.txt; sleep 5"}}, tc.a)
			if !bad.Res.Killed || bad.Res.Violation == nil || !strings.Contains(bad.Res.Violation.Error(), w.W("keep.txt")) {
				t.Fatalf("undeclared write: killed %v, violation %v\n%s", bad.Res.Killed, bad.Res.Violation, bad.Dump())
			}
			// A wall blocks it before the effect (Landlock inside, or
			// bpf-lsm from outside); hook-only mode without bpf-lsm
			// detects it after.
			walled := tc.a.Stage2 || harness.LSM()
			if v := bad.Violation("MUTATES FILE:" + w.W("keep.txt")); v == nil || v.Blocked != walled {
				t.Fatalf("violation %+v, want blocked=%v", v, walled)
			}
			if got := w.Content(w.W("keep.txt")); got != "original\n" {
				t.Fatalf("keep.txt = %q after the strict kill, want it restored", got)
			}
		})
	}
}

// hookCanaries: a hook-only container's canaries are klock's probe's, in
// its cgroup: the connect canary refused by cgroup-net, and the file
// canaries refused by bpf-lsm where the kernel has it, else skipped
// (nothing walls a hook-only container's files: the tracepoints detect).
func hookCanaries(t *testing.T, o *harness.Outcome, a harness.Adopted) {
	t.Helper()
	if a.Stage2 {
		return
	}
	kinds := map[string]vlog.Canary{}
	for _, c := range o.Log.Canaries {
		kinds[c.Kind] = c
	}
	if c := kinds["connect"]; !c.Refused || c.Wall != "cgroup-net" {
		t.Errorf("connect canary %s, want refused by cgroup-net\n%s", c, o.Dump())
	}
	for _, k := range []string{"write", "exec"} {
		c := kinds[k]
		switch {
		case harness.LSM() && (!c.Refused || c.Wall != "bpf-lsm"):
			t.Errorf("%s canary %s, want refused by bpf-lsm\n%s", k, c, o.Dump())
		case !harness.LSM() && c.Skipped == "":
			t.Errorf("%s canary %s, want skipped: no file wall in hook-only mode without bpf-lsm\n%s", k, c, o.Dump())
		}
	}
}
