//go:build linux

package container

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
)

func TestMain(m *testing.M) {
	harness.Main(m, func() {
		if tarDir != "" {
			os.RemoveAll(tarDir) // busyboxTar's
		}
		if ociDir != "" {
			os.RemoveAll(ociDir) // ociImage's
		}
	})
}

// world is one test's klockd, runtime wrapper and workdir.
type world struct {
	t    testing.TB
	bin  string // the directory of klock, klock-stage2, klock-runtime
	sock string
	// runtime is klock-runtime as the engines call it: a script that sets
	// KLOCK_SOCKET (the hooks inherit the runtime's environment) and
	// passes everything on.
	runtime string
	work    string // the host workdir, bound at /workspace
}

func newWorld(t testing.TB) *world {
	t.Helper()
	testutil.RequirePrivileged(t)
	w := &world{t: t, bin: harness.KlockBins(t)}
	dir, err := os.MkdirTemp("/tmp", "kc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	w.sock = harness.Klockd(t, dir, klockdLogger(t))
	w.runtime = harness.RuntimeWrapper(t, dir, w.bin, w.sock)
	w.work = filepath.Join(dir, "work")
	if err := os.Mkdir(w.work, 0o755); err != nil {
		t.Fatal(err)
	}
	// The container's agent runs as nobody (klock-runtime's non-root user).
	os.Chown(w.work, harness.AgentUID, harness.AgentGID)
	w.file("keep.txt", "original\n")
	return w
}

// KlockdLogEnv names a file the test's klockd logs to, at debug level with
// timestamps (where a container's time goes: make bench's profile);
// unset, klockd logs nothing.
const KlockdLogEnv = "KLOCK_CTR_KLOCKD_LOG"

func klockdLogger(t testing.TB) *slog.Logger {
	p := os.Getenv(KlockdLogEnv)
	if p == "" {
		return slog.New(slog.DiscardHandler)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// engine is an OCI runtime bare and klock-runtime in front of it.
type engine struct {
	name string // runc or crun
	bare string // its binary
	// klock is klock-runtime running it: the world's wrapper with
	// --runtime=NAME.
	klock string
	// refuses says why the runtime runs no container on this host (crun
	// on a hybrid cgroup layout); "" when it runs them.
	refuses string
}

// engineNames are the OCI runtimes klock-runtime runs in front of: the
// tests that matter on both run once on each.
var engineNames = []string{"runc", "crun"}

// engine is the runtime called name, bare and behind klock-runtime
// (Unavailable when it is not installed).
// t is the (sub)test that needs it.
func (w *world) engine(t testing.TB, name string) engine {
	t.Helper()
	if name == "runc" {
		return engine{name: name, bare: ctrtest.Runc(t), klock: w.runtime}
	}
	bare, refuses := ctrtest.Crun(t)
	p := filepath.Join(filepath.Dir(w.runtime), "klock-runtime-"+name)
	script := "#!/bin/sh\nexec " + w.runtime + " --runtime=" + name + " \"$@\"\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return engine{name: name, bare: bare, klock: p, refuses: refuses}
}

// refused checks a run on a host the engine refuses: klock-runtime fails
// with the runtime's reason, and nothing of the container ran (the
// workdir as it was). It reports whether the engine refuses here.
func (w *world) refused(t *testing.T, e engine, b *ctrtest.Bundle, id string) bool {
	t.Helper()
	if e.refuses == "" {
		return false
	}
	r := ctrtest.RunC(t, e.klock, b, id)
	if r.Exit == 0 || !strings.Contains(r.Stderr, "hybrid") {
		t.Fatalf("%s refuses this host (%s), yet klock-runtime's run: %+v", e.name, e.refuses, r)
	}
	if got := w.content("keep.txt"); got != "original\n" || w.content("out.txt") != "<absent>" {
		t.Fatalf("%s refused the container, yet the workdir changed: keep.txt %q", e.name, got)
	}
	t.Logf("%s: %s; klock-runtime fails with its reason and nothing ran", e.name, e.refuses)
	return true
}

func (w *world) file(rel, content string) {
	p := filepath.Join(w.work, rel)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
	os.Chown(p, harness.AgentUID, harness.AgentGID)
}

// content is a workdir file's bytes, or "<absent>".
func (w *world) content(rel string) string {
	b, err := os.ReadFile(filepath.Join(w.work, rel))
	if err != nil {
		return "<absent>"
	}
	return string(b)
}

// manifest writes a strict manifest for /workspace and returns its path:
// the agent may make and change /workspace/out.txt and run /bin's
// programs (busybox's applets).
func (w *world) manifest(extra ...string) string {
	return w.manifestIn(policy.ModeStrict, extra...)
}

// manifestIn is manifest in mode (strict or permissive).
func (w *world) manifestIn(mode policy.Mode, extra ...string) string {
	intents := append([]string{"PROVIDES FILE:/workspace/out.txt", "MUTATES FILE:/workspace/out.txt", "PROVIDES PROC:/bin/*"}, extra...)
	p := filepath.Join(filepath.Dir(w.work), "agent.yaml")
	if err := os.WriteFile(p, []byte(harness.ManifestYAML("/workspace", mode, intents)), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return p
}

// log reads the only verification log under the workdir.
func (w *world) log() *vlog.Log {
	w.t.Helper()
	logs, _ := filepath.Glob(filepath.Join(w.work, ".klock", "sessions", "*", "verification.json"))
	if len(logs) != 1 {
		w.t.Fatalf("verification logs under %s: %v, want one", w.work, logs)
	}
	lg, err := vlog.Read(logs[0])
	if err != nil {
		w.t.Fatal(err)
	}
	return lg
}

func (w *world) bundle(args []string, annotations map[string]string) *ctrtest.Bundle {
	return ctrtest.NewBundle(w.t, ctrtest.BundleOptions{Args: args, Annotations: annotations,
		Binds: []ctrtest.Bind{{Host: w.work, Container: "/workspace"}}})
}
