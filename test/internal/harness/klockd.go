//go:build linux

package harness

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/internal/testutil"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// KlockBins builds klock, klock-stage2 and klock-runtime from this tree
// once per test binary, side by side in a directory root's runtimes can
// run them from (Main removes it); $KLOCK_BIN's directory when set (the
// binaries already built).
func KlockBins(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("KLOCK_BIN"); p != "" {
		return filepath.Dir(p)
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "klock-bin-"); binErr != nil {
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

// Klockd serves klockd from the test process on dir/klockd.sock, with the
// suite's kernel backends, until the test ends, and returns the socket.
func Klockd(t testing.TB, dir string, log *slog.Logger) string {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sock := filepath.Join(dir, "klockd.sock")
	srv, err := daemon.Listen(daemon.Config{Socket: sock, Backends: Shared(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return sock
}

// RuntimeWrapper writes dir/klock-runtime, klock-runtime (from bin) as the
// container engines call it: a script that names the test's klockd (the
// OCI hooks inherit the runtime's environment) and passes everything on.
func RuntimeWrapper(t testing.TB, dir, bin, sock string) string {
	t.Helper()
	p := filepath.Join(dir, "klock-runtime")
	script := fmt.Sprintf("#!/bin/sh\nexport %s=%s\nexec %s \"$@\"\n", daemon.SocketEnv, sock, filepath.Join(bin, "klock-runtime"))
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
