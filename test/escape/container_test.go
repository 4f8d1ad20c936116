//go:build linux

package escape

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestEscapesInContainer runs the file and network rows inside a real
// container: runc through klock-runtime (the spec rewritten, klock-stage2
// first inside, the session adopted by klockd at createRuntime), as the
// agent's user, on the host's network (the rows' listeners are the test's
// loopback ones). The container binds the rows' directories, the probe
// and the host's /usr and /lib at their own paths, so every path a row
// names is the same inside and out, and each row's expected outcome holds
// as it does for klock run: blocked, or detected, killed and restored.
func TestEscapesInContainer(t *testing.T) {
	c := newContainerRunner(t)
	n := listen(t)
	ran := 0
	for _, r := range rows(t, n) {
		if why := notInContainer(r); why != "" {
			continue
		}
		ran++
		t.Run(r.name, func(t *testing.T) {
			r := ctrRow(r)
			here := hereRow(r)
			if here.escape != "" && os.Getenv(KnownEscapesEnv) == "" {
				t.Skipf("KNOWN ESCAPE (set %s=1 to run): %s", KnownEscapesEnv, here.escape)
			}
			for _, m := range []policy.Mode{policy.ModePermissive, policy.ModeStrict} {
				t.Run(string(m), func(t *testing.T) { attempt(t, r, m, c.run) })
			}
		})
	}
	if ran < 20 {
		t.Fatalf("%d rows ran in a container, want the file and network rows (at least 20)", ran)
	}
}

// notInContainer says why a row is not one of the file and network rows a
// container runs ("" when it is).
func notInContainer(r row) string {
	switch {
	case strings.Contains(r.name, "own network namespace"):
		return "the containers here share the host's network (the rows' listeners are the test's loopback); the NET-intent row is the one that applies"
	case strings.Contains(r.name, "sub-cgroup"):
		return "a container's cgroup is its runtime's, and its /sys/fs/cgroup is mounted read-only"
	}
	return ""
}

// ctrRow is r's expected outcome in a container where it differs from
// klock run's. (memfd exec is refused as in klock run: klockd sets the
// container's vm.memfd_noexec as klock run's stage 2 sets its own.)
func ctrRow(r row) row {
	if strings.Contains(r.name, "abstract unix socket (agent with a NET intent)") && !harness.LSM() {
		// klock run gives a session with NET intents a network namespace
		// of its own (the host's abstract names do not exist there); a
		// container keeps its runtime's, here the host's: Landlock ABI >=
		// 6 scopes abstract sockets to the domain and refuses the
		// listener outside it.
		r.errno = "EPERM"
	}
	return r
}

// containerRunner runs one row's session as a container.
type containerRunner struct {
	t       *testing.T
	runtime string // klock-runtime behind a script that names the test's klockd
	rootfs  string
	seq     int
	mu      sync.Mutex
}

func newContainerRunner(t *testing.T) *containerRunner {
	testutil.RequirePrivileged(t)
	ctrtest.Runc(t)
	dir, err := os.MkdirTemp("/tmp", "ke")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	sock := harness.Klockd(t, dir, nil)
	c := &containerRunner{t: t, runtime: harness.RuntimeWrapper(t, dir, harness.KlockBins(t), sock), rootfs: ctrtest.HostLikeRootfs(t, filepath.Join(dir, "rootfs"))}
	return c
}

func (c *containerRunner) run(e *env, s harness.Spec) *harness.Outcome {
	t := e.T
	t.Helper()
	mode := s.Mode
	base := filepath.Dir(e.Workdir)
	mpath := filepath.Join(base, "agent.yaml")
	if err := os.WriteFile(mpath, []byte(harness.ManifestYAML(e.Workdir, mode, s.Intents)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.seq++
	id := fmt.Sprintf("ke-%d-%d", os.Getpid(), c.seq)
	c.mu.Unlock()
	binds := []ctrtest.Bind{{Host: base, Container: base}, {Host: filepath.Dir(harness.Probe), Container: filepath.Dir(harness.Probe), ReadOnly: true}}
	binds = append(binds, ctrtest.HostSystemBinds()...)
	b := ctrtest.NewBundle(t, ctrtest.BundleOptions{Rootfs: c.rootfs, Args: s.Command,
		Env: append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", harness.ProbeEnv + "=1"}, s.Env...),
		UID: harness.AgentUID, GID: harness.AgentGID, Cwd: e.Workdir, Binds: binds, HostNetwork: true,
		Annotations: map[string]string{"io.klock.manifest": mpath}})
	r := ctrtest.RunC(t, c.runtime, b, id)
	// The session's log is the one its id names (a row may plant others).
	var lg *vlog.Log
	var logPath string
	logs, _ := filepath.Glob(filepath.Join(e.Workdir, ".klock", "sessions", "*", "verification.json"))
	for _, p := range logs {
		if l, err := vlog.Read(p); err == nil && l.Container != nil && l.Container.ID == id {
			lg, logPath = l, p
		}
	}
	if lg == nil {
		t.Fatalf("container %s: no verification log of its session among %v; runtime: %+v", id, logs, r)
	}
	// A strict kill is the runtime's failure too, whether the kill beat
	// the container's own exit or not (klock-runtime's run reports it).
	if lg.Exit.KilledByKlock && r.Exit != 137 {
		t.Errorf("container %s: klock-runtime run exited %d after klock killed its session, want 137", id, r.Exit)
	}
	res := &session.Result{ID: lg.Session, Killed: lg.Exit.KilledByKlock, Reason: lg.Exit.Reason, LogPath: logPath, Log: lg,
		Exit: launch.Exit{Code: r.Exit}}
	if r.Exit > 128 {
		res.Exit = launch.Exit{Code: -1, Signal: syscall.Signal(r.Exit - 128)}
	}
	for _, v := range lg.Violations {
		if v.Action == "violation-kill" {
			res.Violation = errors.New(v.Error)
			break
		}
	}
	if strings.Contains(r.Stderr, "klock-stage2:") {
		t.Logf("stage 2: %s", r.Stderr)
	}
	return &harness.Outcome{Res: res, Log: lg, Stdout: r.Stdout, Stderr: r.Stderr, Probe: harness.ParseProbe(r.Stdout), ManifestPath: mpath}
}
