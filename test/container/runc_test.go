//go:build linux

package container

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestRuncDeclaredWrite: runc, and crun, through klock-runtime; the
// container writes what its manifest declares: exit 0, the file on the
// host, a CLEAN log in the workdir's host path naming the container and
// runtime mode.
func TestRuncDeclaredWrite(t *testing.T) {
	for _, name := range engineNames {
		t.Run(name, func(t *testing.T) { testDeclaredWrite(t, name) })
	}
}

func testDeclaredWrite(t *testing.T, runtime string) {
	w := newWorld(t)
	e := w.engine(t, runtime)
	b := w.bundle([]string{"sh", "-c", "id -u; echo declared > /workspace/out.txt"}, map[string]string{"io.klock.manifest": w.manifest()})
	if w.refused(t, e, b, "kc-clean") {
		return
	}
	r := ctrtest.RunC(t, e.klock, b, "kc-clean")
	if r.Exit != 0 || strings.TrimSpace(r.Stdout) != "65534" {
		t.Fatalf("klock-runtime run: %+v (want exit 0, uid 65534: the rewritten spec's user)", r)
	}
	if got := w.content("out.txt"); got != "declared\n" {
		t.Fatalf("out.txt = %q", got)
	}
	lg := w.log()
	if lg.Verdict != "CLEAN" || lg.Container == nil || lg.Container.ID != "kc-clean" || lg.Container.Mode != "runtime" {
		t.Fatalf("log: verdict %s, container %+v, violations %+v", lg.Verdict, lg.Container, lg.Violations)
	}
}

// TestRuncStrictKill: a container that writes outside its declared scope
// is killed (runc reports SIGKILL), its bind-mounted workdir is restored
// byte for byte (the undeclared write undone, the declared one too: a
// strict kill rolls the whole session back), and the log names the
// container's path and the host's. On runc and on crun.
func TestRuncStrictKill(t *testing.T) {
	for _, name := range engineNames {
		t.Run(name, func(t *testing.T) { testStrictKill(t, name) })
	}
}

func testStrictKill(t *testing.T, runtime string) {
	w := newWorld(t)
	e := w.engine(t, runtime)
	b := w.bundle([]string{"sh", "-c", "echo declared > /workspace/out.txt; echo changed > /workspace/keep.txt; sleep 30"},
		map[string]string{"io.klock.manifest": w.manifest()})
	if w.refused(t, e, b, "kc-kill") {
		return
	}
	r := ctrtest.RunC(t, e.klock, b, "kc-kill")
	if r.Exit != 137 {
		t.Fatalf("klock-runtime run: %+v, want exit 137 (killed)", r)
	}
	if got := w.content("keep.txt"); got != "original\n" {
		t.Fatalf("keep.txt = %q after the kill, want it restored", got)
	}
	if got := w.content("out.txt"); got != "<absent>" {
		t.Fatalf("out.txt = %q after the kill, want it removed (the session made it)", got)
	}
	lg := w.log()
	if lg.Verdict == "CLEAN" || !lg.Exit.KilledByKlock {
		t.Fatalf("log: verdict %s, exit %+v", lg.Verdict, lg.Exit)
	}
	harness.AssertContainerLogged(t, lg, "/workspace/keep.txt", filepath.Join(w.work, "keep.txt"))
}

// TestRuncStrictKillAfterExit: a container whose undeclared operation
// (a hard link of a file outside its scope, which the kernel refuses
// across mounts with EXDEV) is its last: it exits 1 by itself before
// klockd reads the violation, and the kill lands on nothing. run through
// klock-runtime still reports the strict kill (137), and the log holds
// the refused link's violation as klock run logs it: the second name's
// CONSUMES of the outside file, not blocked (EXDEV is no wall's EACCES),
// errno EXDEV, killed.
func TestRuncStrictKillAfterExit(t *testing.T) {
	w := newWorld(t)
	secret := filepath.Join(filepath.Dir(w.work), "secret")
	if err := os.Mkdir(secret, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "s.txt"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := ctrtest.NewBundle(t, ctrtest.BundleOptions{Args: []string{"ln", "/secret/s.txt", "/workspace/out.txt"},
		Annotations: map[string]string{"io.klock.manifest": w.manifest()},
		Binds:       []ctrtest.Bind{{Host: w.work, Container: "/workspace"}, {Host: secret, Container: "/secret"}}})
	r := ctrtest.RunC(t, w.runtime, b, "kc-kill-late")
	if r.Exit != 137 || !strings.Contains(r.Stderr, "Invalid cross-device link") {
		t.Fatalf("klock-runtime run: %+v, want exit 137 (killed by klock) after ln's EXDEV", r)
	}
	if !strings.Contains(r.Stderr, "killed by klock") {
		t.Fatalf("klock-runtime does not say klock killed the container: %q", r.Stderr)
	}
	lg := w.log()
	if lg.Verdict != vlog.VerdictViolation || !lg.Exit.KilledByKlock || len(lg.Violations) != 1 {
		t.Fatalf("log: verdict %s, exit %+v, violations %+v", lg.Verdict, lg.Exit, lg.Violations)
	}
	v := lg.Violations[0]
	want := "ScopeViolationError: Agent attempted CONSUMES on /secret/s.txt but declared nothing there"
	if v.Triple != "CONSUMES FILE:/secret/s.txt" || v.Path != "/secret/s.txt" || v.Error != want || v.Needed != v.Triple ||
		v.Blocked || v.Errno != int32(syscall.EXDEV) || v.Action != "violation-kill" || v.Syscall != "link" || v.Source != "tracepoint" {
		t.Fatalf("violation %+v, want the refused link's CONSUMES of /secret/s.txt (EXDEV, not blocked, killed)", v)
	}
	if lg.Exit.Reason != want {
		t.Fatalf("kill reason %q, want %q", lg.Exit.Reason, want)
	}
	if got := w.content("out.txt"); got != "<absent>" {
		t.Fatalf("out.txt = %q", got)
	}
}

// TestRuncNoManifestUntouched: a container without a manifest runs as the
// runtime would run it: klock-runtime leaves its config.json byte for
// byte as it was, and nothing is logged.
func TestRuncNoManifestUntouched(t *testing.T) {
	w := newWorld(t)
	b := ctrtest.NewBundle(t, ctrtest.BundleOptions{Args: []string{"sh", "-c", "echo free > /workspace/keep.txt"}, UID: 65534, GID: 65534,
		Binds: []ctrtest.Bind{{Host: w.work, Container: "/workspace"}}})
	before := b.Read(t)
	c := ctrtest.Create(t, w.runtime, b, "kc-untouched")
	if after := b.Read(t); !bytes.Equal(before, after) {
		t.Fatalf("config.json changed:\n%s\n---\n%s", before, after)
	}
	c.Start()
	if r := c.Wait(); r.Exit != 0 {
		t.Fatalf("container: %+v", r)
	}
	if got := w.content("keep.txt"); got != "free\n" {
		t.Fatalf("keep.txt = %q", got)
	}
	if _, err := os.Stat(filepath.Join(w.work, ".klock")); err == nil {
		t.Fatalf("klock state in the workdir of a container without a manifest")
	}
}

// TestRuncRequireManifest: with require: true in runtime.yaml a container
// without a manifest is refused at create, saying why.
func TestRuncRequireManifest(t *testing.T) {
	w := newWorld(t)
	cfg := filepath.Join(filepath.Dir(w.work), "runtime.yaml")
	if err := os.WriteFile(cfg, []byte("require: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := w.bundle([]string{"true"}, nil)
	r := ctrtest.RunC(t, w.runtime, b, "kc-require", "--klock-config="+cfg)
	if r.Exit == 0 || !strings.Contains(r.Stderr, "manifest") {
		t.Fatalf("create without a manifest under require: %+v", r)
	}
}

// TestRuncRelativeNamesOfExitedProcesses: short-lived processes in a
// container change files by relative names (busybox's touch and chmod in
// the workdir, each gone at once) and the strict session is CLEAN: a name
// whose process exited before the observer read it resolves from the
// container's working directories, as the container names them.
func TestRuncRelativeNamesOfExitedProcesses(t *testing.T) {
	w := newWorld(t)
	script := `set -e
cd /workspace
i=0
while [ $i -lt 30 ]; do
	touch rel$i
	chmod 600 rel$i
	i=$((i+1))
done
echo done`
	b := w.bundle([]string{"sh", "-c", script}, map[string]string{"io.klock.manifest": w.manifest("PROVIDES FILE:/workspace/**", "MUTATES FILE:/workspace/**")})
	r := ctrtest.RunC(t, w.runtime, b, "kc-relative")
	if r.Exit != 0 || !strings.Contains(r.Stdout, "done") {
		t.Fatalf("klock-runtime run: %+v, want exit 0", r)
	}
	lg := w.log()
	if lg.Verdict != "CLEAN" {
		t.Fatalf("log: verdict %s, violations %+v", lg.Verdict, lg.Violations)
	}
	for _, o := range lg.Observed {
		if strings.Contains(o.Triple, "FILE:rel") {
			t.Errorf("observed %s: a relative name left unresolved", o.Triple)
		}
	}
}

// TestRuncRelativeNameOfTheOnlyProcess: the container's one process
// (touch out.txt, started in /workspace by the spec's cwd) makes a file by
// a relative name and exits; no process of the container is left to show
// its directory, and the session still names /workspace/out.txt, CLEAN.
func TestRuncRelativeNameOfTheOnlyProcess(t *testing.T) {
	w := newWorld(t)
	b := ctrtest.NewBundle(t, ctrtest.BundleOptions{Args: []string{"touch", "out.txt"}, Cwd: "/workspace",
		Annotations: map[string]string{"io.klock.manifest": w.manifest()},
		Binds:       []ctrtest.Bind{{Host: w.work, Container: "/workspace"}}})
	r := ctrtest.RunC(t, w.runtime, b, "kc-relative-one")
	if r.Exit != 0 {
		t.Fatalf("klock-runtime run: %+v, want exit 0", r)
	}
	lg := w.log()
	if lg.Verdict != "CLEAN" {
		t.Fatalf("log: verdict %s, violations %+v", lg.Verdict, lg.Violations)
	}
	var named bool
	for _, o := range lg.Observed {
		named = named || o.Triple == "PROVIDES FILE:/workspace/out.txt"
	}
	if !named {
		t.Errorf("no PROVIDES FILE:/workspace/out.txt observed: %+v", lg.Observed)
	}
}

// TestRuncRefusedAfterTheHook: the createRuntime hook returns once the
// container is watched and walled, and the session finishes preparing
// while the runtime sets the container up; a step that fails then (here
// the pre-flight backup: the workdir's .klock/backups is a file) refuses the
// container all the same. Its entrypoint never runs, the container ends
// with klock-stage2's exit status, and the error says why.
func TestRuncRefusedAfterTheHook(t *testing.T) {
	w := newWorld(t)
	if err := os.Mkdir(filepath.Join(w.work, ".klock"), 0o755); err != nil {
		t.Fatal(err)
	}
	w.file(".klock/backups", "not a directory\n")
	b := w.bundle([]string{"sh", "-c", "echo ran > /workspace/ran.txt"}, map[string]string{"io.klock.manifest": w.manifest()})
	r := ctrtest.RunC(t, w.runtime, b, "kc-refused-late")
	if r.Exit == 0 {
		t.Fatalf("a container whose backup failed ran: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(w.work, "ran.txt")); err == nil {
		t.Fatalf("the entrypoint of a refused container ran: %+v", r)
	}
	if r.Exit != 125 || !strings.Contains(r.Stderr, "klockd did not release this container: it refused it") || !strings.Contains(r.Stderr, "pre-flight backup") {
		t.Fatalf("want klock-stage2's refusal (exit 125) saying why (the backup): %+v", r)
	}
}
