//go:build linux

package container

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/brokenwall"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestRuncCanaries: a container's entrypoint runs only after its stage 2
// proved the walls as klock run's does: a write, an exec and a connect
// the manifest does not declare, tried as the container's process in its
// cgroup, namespaces and walls, each refused; the log says by which wall,
// and none of them reached the engine as the agent's.
func TestRuncCanaries(t *testing.T) {
	w := newWorld(t)
	e := w.engine(t, "runc")
	b := w.bundle([]string{"sh", "-c", "echo declared > /workspace/out.txt"}, map[string]string{"io.klock.manifest": w.manifest()})
	if r := ctrtest.RunC(t, e.klock, b, "kc-canary"); r.Exit != 0 {
		t.Fatalf("klock-runtime run: %+v", r)
	}
	lg := w.log()
	if lg.Verdict != "CLEAN" {
		t.Fatalf("verdict %s: %+v", lg.Verdict, lg.Violations)
	}
	fileWall := harness.FileWall()
	var kinds []string
	for _, c := range lg.Canaries {
		kinds = append(kinds, c.Kind)
		if !c.Refused {
			t.Errorf("canary %s: want refused", c)
		}
		if c.Kind != "connect" && (c.Wall != fileWall || c.Errno != harness.Refusal()) {
			t.Errorf("%s canary refused by %s (%s), want %s (%s)", c.Kind, c.Wall, c.Errno, fileWall, harness.Refusal())
		}
	}
	if !slices.Equal(kinds, []string{"exec", "write", "connect"}) {
		t.Fatalf("canaries tried %q, want exec, write, connect (the exec first)", kinds)
	}
	for _, ob := range lg.Observed {
		if strings.Contains(ob.Triple, launch.DefaultCanaryDir) || strings.Contains(ob.Triple, launch.CanaryConnect) {
			t.Errorf("a canary reached the engine as the container's: %+v", ob)
		}
	}
}

// TestRuncCanariesCatchABrokenWall: a container whose klock-stage2 is the
// klocktest_brokenwall build (it builds its Landlock ruleset and never
// enforces it) is caught by the canaries before its entrypoint: in strict
// mode the container does not start (the entrypoint never ran) and the
// error names the wall and the kernel; in permissive mode it runs, klock
// ps and the log's headline say the wall is not enforcing.
func TestRuncCanariesCatchABrokenWall(t *testing.T) {
	if brokenwall.On || harness.LSM() {
		t.Skip("the broken bpf-lsm wall is the VM's klocktest_brokenwall test binary (test/e2e); here stage 2's Landlock is broken")
	}
	w := newWorld(t)
	ctrtest.Runc(t)
	runtime := w.brokenRuntime(t)
	// Strict: refused before the entrypoint.
	b := w.bundle([]string{"touch", "/workspace/out.txt"}, map[string]string{"io.klock.manifest": w.manifest()})
	r := ctrtest.RunC(t, runtime, b, "kc-broken")
	if r.Exit == 0 || !strings.Contains(r.Stderr, "a wall is not enforcing on kernel") || !strings.Contains(r.Stderr, "landlock let the write canary") {
		t.Fatalf("strict container behind a broken wall: %+v, want its start refused naming the wall and the kernel", r)
	}
	if got := w.content("out.txt"); got != "<absent>" {
		t.Fatalf("the entrypoint ran although its wall was not enforcing (out.txt %q)", got)
	}
	lg := w.log()
	if !lg.Exit.KilledByKlock || !strings.Contains(lg.Exit.Reason, "a wall is not enforcing") || !strings.Contains(lg.Summary, "WALL NOT ENFORCING") {
		t.Fatalf("log: exit %+v, headline %q", lg.Exit, lg.Summary)
	}
	t.Logf("strict: %s; log: %s", strings.TrimSpace(r.Stderr), lg.Summary)
	os.RemoveAll(filepath.Join(w.work, ".klock", "sessions"))

	// Permissive: it runs, and says so while it runs and in its log.
	b = w.bundle([]string{"sh", "-c", "touch /workspace/out.txt; while [ ! -e /workspace/stop ]; do sleep 0.1; done"},
		map[string]string{"io.klock.manifest": w.manifestIn(policy.ModePermissive)})
	c := ctrtest.Create(t, runtime, b, "kc-broken-p")
	c.Start()
	walls := w.notEnforcing(t)
	if !slices.Contains(walls, "landlock (write)") {
		t.Fatalf("klock ps: not enforcing %q, want landlock (write)", walls)
	}
	w.file("stop", "")
	if r := c.Wait(); r.Exit != 0 {
		t.Fatalf("permissive container: %+v", r)
	}
	c.Delete()
	if w.content("out.txt") == "<absent>" {
		t.Fatal("the permissive entrypoint did not run")
	}
	lg = w.log()
	t.Logf("permissive: klock ps %q; log: %s", walls, lg.Summary)
	if !strings.Contains(lg.Summary, "WALL NOT ENFORCING (canary let through): ") || !strings.Contains(lg.Summary, "landlock (write)") {
		t.Errorf("headline %q does not say the wall is not enforcing", lg.Summary)
	}
}

// brokenRuntime is klock-runtime with the klocktest_brokenwall
// klock-stage2 beside it (what it copies into the container): klock and
// klock-runtime hard-linked from the suite's, the runtime wrapper on the
// world's klockd.
func (w *world) brokenRuntime(t *testing.T) string {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	testutil.BuildCommand(t, dir, "klock-stage2", "-tags", "klocktest_brokenwall")
	for _, n := range []string{"klock", "klock-cli", "klock-runtime"} {
		if err := os.Link(filepath.Join(w.bin, n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	wrapper := filepath.Join(dir, "wrapper")
	if err := os.Mkdir(wrapper, 0o755); err != nil {
		t.Fatal(err)
	}
	return harness.RuntimeWrapper(t, wrapper, dir, w.sock)
}

// notEnforcing is what klock ps says of the world's one container session
// once its stage 2 reported its canaries (bounded wait: the report comes
// before the entrypoint's exec).
func (w *world) notEnforcing(t *testing.T) []string {
	cl, err := daemon.Dial(w.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		list, err := cl.PS()
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 && len(list[0].NotEnforcing) > 0 {
			return list[0].NotEnforcing
		}
	}
	t.Fatal("klock ps never said a wall was not enforcing")
	return nil
}

// canaryRefused reports whether lg's canary of kind was refused by wall.
func canaryRefused(lg *vlog.Log, kind, wall string) bool {
	for _, c := range lg.Canaries {
		if c.Kind == kind {
			return c.Refused && c.Wall == wall
		}
	}
	return false
}
