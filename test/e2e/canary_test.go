//go:build linux

package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/brokenwall"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestCanariesProveTheWalls: before the agent runs, a write, an exec and
// a connect the manifest does not declare are tried in the session's own
// cgroup, namespaces and wall, and each is refused; the log says by
// which wall, and none of them is the agent's violation.
func TestCanariesProveTheWalls(t *testing.T) {
	w := harness.NewWorld(t)
	o := w.Run(harness.Spec{Intents: []string{"PROVIDES PROC:" + dash(t)}, Command: []string{"/bin/sh", "-c", "exit 0"}})
	o.AssertClean(t, 0)
	kinds := map[string]vlog.Canary{}
	for _, c := range o.Log.Canaries {
		kinds[c.Kind] = c
	}
	fileWall := harness.FileWall()
	for _, k := range []string{"write", "exec", "connect"} {
		c, ok := kinds[k]
		if !ok || !c.Refused {
			t.Fatalf("%s canary %+v, want refused\n%s", k, c, o.Dump())
		}
		if k != "connect" && (c.Wall != fileWall || c.Errno != harness.Refusal()) {
			t.Errorf("%s canary refused by %s (%s), want %s (%s)", k, c.Wall, c.Errno, fileWall, harness.Refusal())
		}
	}
	for _, ob := range o.Log.Observed {
		if strings.Contains(ob.Triple, launch.DefaultCanaryDir) {
			t.Errorf("a canary reached the engine as the agent's: %+v", ob)
		}
	}
}

// TestCanariesSkipWhatTheScopeAllows: a manifest that lets the agent
// write where the write canary lives is not a broken wall: that canary
// is skipped and says why, the others still run.
func TestCanariesSkipWhatTheScopeAllows(t *testing.T) {
	w := harness.NewWorld(t)
	o := w.Run(harness.Spec{Intents: []string{"PROVIDES PROC:" + dash(t), "MUTATES FILE:" + launch.DefaultCanaryDir + "/**"},
		Command: []string{"/bin/sh", "-c", "exit 0"}})
	o.AssertClean(t, 0)
	for _, c := range o.Log.Canaries {
		if c.Kind == "write" && c.Skipped == "" || c.Kind != "write" && !c.Refused {
			t.Errorf("canary %s, want the write skipped and the rest refused", c)
		}
	}
}

// TestCanariesCatchABrokenWall: a wall that enforces nothing (the
// klocktest_brokenwall build: a Landlock ruleset never enforced, bpf-lsm
// rules that grant everything) is caught by the write canary before the
// agent runs: in strict mode the start fails with
// launch.ErrWallNotEnforcing naming the wall and the kernel, and the
// agent never ran; in permissive mode the agent runs and the log's
// headline says the wall is not enforcing. On the host the test builds
// the broken klock-stage2 itself (Landlock); the VM runs a test binary
// built with the tag (vmtests/vmtest.sh: bpf-lsm), where stage 2 is that
// binary.
func TestCanariesCatchABrokenWall(t *testing.T) {
	var broken string
	switch {
	case brokenwall.On:
	case harness.LSM() || os.Getenv("KLOCK_IN_VM") == "1":
		t.Skip("the VM runs this test in its klocktest_brokenwall binary (no Go toolchain there to build one)")
	default:
		broken = brokenStage2(t)
	}
	fileWall := harness.FileWall()
	w := harness.NewWorld(t)
	spec, marker := touchMarker(t, w)
	spec.Stage2 = broken
	_, err := w.RunErr(spec)
	if !errors.Is(err, launch.ErrWallNotEnforcing) || !strings.Contains(err.Error(), fileWall) || !strings.Contains(err.Error(), "kernel") {
		t.Fatalf("strict start with a broken wall: %v, want ErrWallNotEnforcing naming %s and the kernel", err, fileWall)
	}
	if w.Exists(marker) {
		t.Fatal("the agent ran although its wall was not enforcing")
	}
	spec.Mode, spec.WallNotEnforcing = policy.ModePermissive, true
	o := w.Run(spec)
	if !w.Exists(marker) {
		t.Fatalf("the permissive agent did not run\n%s", o.Dump())
	}
	if !strings.Contains(o.Log.Summary, "WALL NOT ENFORCING (canary let through): ") || !strings.Contains(o.Log.Summary, fileWall+" (write)") {
		t.Errorf("headline %q does not say the wall is not enforcing", o.Log.Summary)
	}
}

// touchMarker is a strict session whose agent makes marker, which
// exists only if the agent ran.
func touchMarker(t *testing.T, w *harness.World) (spec harness.Spec, marker string) {
	marker = w.W("agent-ran")
	return harness.Spec{Intents: []string{"PROVIDES PROC:" + dash(t), "PROVIDES PROC:/usr/bin/touch", "PROVIDES FILE:" + marker},
		Command: []string{"/usr/bin/touch", marker}}, marker
}

// brokenStage2 builds the klocktest_brokenwall klock-stage2 into a
// root-owned directory (launch runs only such a stage 2).
func brokenStage2(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "klock-brokenwall-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "klock-stage2")
	cmd := exec.Command("go", "build", "-tags", "klocktest_brokenwall", "-o", bin, "github.com/klocklabs/klock/cmd/klock-stage2")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the broken stage 2: %v\n%s", err, out)
	}
	return bin
}

// TestAdoptedCanariesCatchABrokenWall: a container's stage 2 (runtime
// mode, the session adopting its process) proves the walls as klock
// run's does, and klock's probe does for a hook-only container under
// bpf-lsm, so the klocktest_brokenwall build is caught there too: in
// strict mode the session ends with launch.ErrWallNotEnforcing and the
// entrypoint never ran; in permissive mode it runs and the headline says
// so. The adopted process's stage 2 is this test binary, broken only in
// the VM's klocktest_brokenwall build (bpf-lsm); on the host,
// test/container's TestRuncCanariesCatchABrokenWall covers Landlock with
// a broken klock-stage2 behind runc.
func TestAdoptedCanariesCatchABrokenWall(t *testing.T) {
	if !brokenwall.On {
		t.Skip("needs the klocktest_brokenwall test binary as the container's stage 2 (the VM's)")
	}
	for _, a := range []harness.Adopted{{Stage2: true}, {}} {
		if !a.Stage2 && !harness.LSM() {
			continue // hook-only mode without bpf-lsm has no file wall to break
		}
		t.Run(map[bool]string{true: "runtime", false: "hook"}[a.Stage2], func(t *testing.T) { adoptedBrokenWall(t, a) })
	}
}

// adoptedBrokenWall: a broken file wall refused in strict mode, reported
// in permissive mode, for a container adopted as a.
func adoptedBrokenWall(t *testing.T, a harness.Adopted) {
	fileWall := harness.FileWall()
	w := harness.NewWorld(t)
	spec, marker := touchMarker(t, w)
	o, err := w.AdoptErr(spec, a)
	if !errors.Is(err, launch.ErrWallNotEnforcing) || !strings.Contains(err.Error(), fileWall) || !strings.Contains(err.Error(), "kernel") {
		t.Fatalf("strict container with a broken wall: %v, want ErrWallNotEnforcing naming %s and the kernel\n%s", err, fileWall, o.Stderr)
	}
	if w.Exists(marker) || o.Log == nil || !o.Log.Exit.KilledByKlock {
		t.Fatalf("the entrypoint ran although its wall was not enforcing, or the log does not say it was refused\n%s", o.Dump())
	}
	spec.Mode, spec.WallNotEnforcing = policy.ModePermissive, true
	o = w.Adopt(spec, a)
	if !w.Exists(marker) {
		t.Fatalf("the permissive entrypoint did not run\n%s", o.Dump())
	}
	if !strings.Contains(o.Log.Summary, "WALL NOT ENFORCING (canary let through): ") || !strings.Contains(o.Log.Summary, fileWall+" (write)") {
		t.Errorf("headline %q does not say the wall is not enforcing", o.Log.Summary)
	}
}
