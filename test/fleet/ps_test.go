package fleet

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// klock ps says which sessions' heartbeats the fleet's etcd does not
// answer, since when, and that a permissive one's agent is frozen.
func TestPSShowsALeaseStall(t *testing.T) {
	c, store := oneMemberFleet(t)
	w := harness.NewWorld(t)
	w.Dir(w.W("a"))
	sock := filepath.Join(t.TempDir(), "klockd.sock")
	srv, err := daemon.Listen(daemon.Config{Socket: sock, Backends: harness.Shared(), Leases: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Shutdown(context.Background())
	m := filepath.Join(filepath.Dir(w.Workdir), "m.yaml")
	data := harness.ManifestYAML(w.Workdir, policy.ModePermissive, []string{"PROVIDES PROC:" + harness.Real(t, "/bin/sh"),
		"PROVIDES PROC:" + harness.Real(t, "/usr/bin/sleep"), "MUTATES FILE:" + w.W("a") + "/**"})
	if err := os.WriteFile(m, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	klock := filepath.Join(harness.KlockBins(t), "klock")
	run := exec.Command(klock, "run", "-q", "-m", m, "--lease-ttl", "9s", "--user", "65534", "--", "/bin/sh", "-c", "exec sleep 60")
	run.Env = append(os.Environ(), daemon.SocketEnv+"="+sock)
	var stderr testutil.SyncBuffer
	run.Stderr = &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = run.Process.Kill(); _ = run.Wait() }()
	ps := func() string {
		out, err := exec.Command(klock, "ps", "--socket", sock).CombinedOutput()
		if err != nil {
			t.Fatalf("klock ps: %v %s", err, out)
		}
		return string(out)
	}
	waitPS := func(want string, yes bool) string {
		for end := time.Now().Add(40 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			out := ps()
			if strings.Contains(out, want) == yes && strings.Contains(out, "running") {
				return out
			}
			if time.Now().After(end) {
				t.Fatalf("klock ps never showed %q=%v:\n%s\nklock run: %s", want, yes, out, stderr.String())
			}
		}
	}
	waitPS("running", true)
	c.Members[0].Pause()
	out := waitPS("lease store unreachable since", true)
	if !strings.Contains(out, "frozen") {
		t.Errorf("a permissive session's stall without frozen:\n%s", out)
	}
	c.Members[0].Resume()
	waitPS("lease store unreachable", false)
}
