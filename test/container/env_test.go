//go:build linux

package container

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
)

func TestMain(m *testing.M) {
	harness.Main(m, func() {
		for _, d := range []string{binDir, tarDir} { // what the suite built
			if d != "" {
				os.RemoveAll(d)
			}
		}
	})
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// bins builds klock, klock-stage2 and klock-runtime from this tree once,
// side by side in a directory the runtimes can run them from ($KLOCK_BIN's
// directory when set: binaries already built).
func bins(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("KLOCK_BIN"); p != "" {
		return filepath.Dir(p)
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "klock-ctr-bin-"); binErr != nil {
			return
		}
		os.Chmod(binDir, 0o755)
		for _, n := range []string{"klock", "klock-stage2", "klock-runtime"} {
			if _, binErr = testutil.Build(binDir, n); binErr != nil {
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
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
	w := &world{t: t, bin: bins(t)}
	dir, err := os.MkdirTemp("/tmp", "kc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	w.sock = filepath.Join(dir, "klockd.sock")
	srv, err := daemon.Listen(daemon.Config{Socket: w.sock, Backends: harness.Shared(), Logger: klockdLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	w.runtime = filepath.Join(dir, "klock-runtime")
	script := fmt.Sprintf("#!/bin/sh\nexport %s=%s\nexec %s \"$@\"\n", daemon.SocketEnv, w.sock, filepath.Join(w.bin, "klock-runtime"))
	if err := os.WriteFile(w.runtime, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
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
	intents := append([]string{"PROVIDES FILE:/workspace/out.txt", "MUTATES FILE:/workspace/out.txt", "PROVIDES PROC:/bin/*"}, extra...)
	p := filepath.Join(filepath.Dir(w.work), "agent.yaml")
	if err := os.WriteFile(p, []byte(harness.ManifestYAML("/workspace", "strict", intents)), 0o644); err != nil {
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

// violationAt checks the log's violation names the container's path and
// its rollback the host's path of the same file.
func assertLogged(t *testing.T, lg *vlog.Log, container, host string) {
	t.Helper()
	if lg.Container == nil {
		t.Fatalf("the log names no container")
	}
	found := false
	for _, v := range lg.Violations {
		if strings.HasSuffix(v.Triple, ":"+container) {
			found = true
		}
	}
	if !found {
		b, _ := json.MarshalIndent(lg.Violations, "", " ")
		t.Fatalf("no violation on %s in the log: %s", container, b)
	}
	for _, op := range lg.Rollback {
		if op.Path == host && op.ContainerPath == container && op.OK {
			return
		}
	}
	b, _ := json.MarshalIndent(lg.Rollback, "", " ")
	t.Fatalf("no rollback of %s (container %s) in the log: %s", host, container, b)
}
