//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestLeasesOfAKilledKlockExpire: a klock
// that dies holding leases (kill -9 of an embedded klock run, and of
// klockd running a session) keeps them until TTL + grace after its last
// heartbeat; a session waiting for them is granted only then, and never
// while they are held.
func TestLeasesOfAKilledKlockExpire(t *testing.T) {
	testutil.RequirePrivileged(t)
	const ttl, grace = 2 * time.Second, time.Second
	t.Run("embedded klock run", func(t *testing.T) {
		env := []string{daemon.SocketEnv + "=" + filepath.Join(t.TempDir(), "no-klockd.sock")}
		crashAndWait(t, env, func(r *klockRun) { r.cmd.Process.Signal(syscall.SIGKILL) }, ttl, grace)
	})
	t.Run("klockd", func(t *testing.T) {
		d, sock := startKlockdProcess(t)
		env := []string{daemon.SocketEnv + "=" + sock}
		crashAndWait(t, env, func(*klockRun) { d.Process.Signal(syscall.SIGKILL) }, ttl, grace)
	})
}

// crashAndWait starts a session holding a/** (through env's klockd, or
// embedded), a second embedded session over the whole workdir that waits
// for it, then crashes the first's klock with crash: the second must run
// after the first's leases expire, and not before.
func crashAndWait(t *testing.T, env []string, crash func(*klockRun), ttl, grace time.Duration) {
	w := harness.NewWorld(t)
	w.File(w.W("a", "x"), "a v1\n")
	manifest := func(name string, intents ...string) string {
		data := strings.Replace(harness.ManifestYAML(w.Workdir, policy.ModeStrict, append([]string{"PROVIDES PROC:" + dash(t), "PROVIDES PROC:" + harness.Real(t, "/bin/sleep")}, intents...)),
			"agent: {id: klock-e2e}", "agent: {id: "+name+"}", 1)
		p := filepath.Join(filepath.Dir(w.Workdir), name+".yaml")
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ma := manifest("holder", "MUTATES FILE:"+w.W("a")+"/**")
	mc := manifest("waiter", "MUTATES FILE:"+w.Workdir+"/**", "PROVIDES FILE:"+w.Workdir+"/**")
	a := startKlockRun(t, env, "-m", ma, "-q", "--lease-ttl", ttl.String(), "--lease-grace", grace.String(),
		"--", "/bin/sh", "-c", "echo 'a v2' > a/x; echo up; exec sleep 600")
	if line := a.line(t); line != "up" {
		t.Fatalf("the holder: %q (exit %d)\n%s", line, a.wait(t), a.stderr.String())
	}
	c := startKlockRun(t, []string{daemon.SocketEnv + "=" + filepath.Join(t.TempDir(), "none.sock")},
		"-m", mc, "--no-daemon", "--wait", "60s", "--", "/bin/sh", "-c", "echo c > c.txt")
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(c.stderr.String(), "waiting for session"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the waiter says nothing of waiting:\n%s", c.stderr.String())
		}
	}
	if w.Exists(w.W("c.txt")) {
		t.Fatal("the waiter ran while the holder's klock lived")
	}
	crash(a)
	// The holder's leases as its klock left them: held until the last
	// heartbeat's expiry plus grace (KLIS-3). Heartbeats come every TTL/3,
	// but on a slow (emulated) kernel one can be late, so the bound is
	// read from the store rather than assumed from the kill's time. Read
	// at once: a killed process runs no more of its code (a heartbeat it
	// was writing holds the journal's lock, which the store's read waits
	// for), while its death (closing its BPF objects) and reaping can take
	// seconds there, past the leases' expiry.
	heldUntil := holderExpiry(t, "holder")
	if code := c.wait(t); code != 0 {
		t.Fatalf("the waiter: exit %d\n%s", code, c.stderr.String())
	}
	st, err := os.Stat(w.W("c.txt"))
	if err != nil {
		t.Fatalf("the waiter did not run: %v\n%s", err, c.stderr.String())
	}
	// A file's mtime is the kernel's coarse clock: a tick behind.
	if st.ModTime().Before(heldUntil.Add(-20 * time.Millisecond)) {
		t.Fatalf("the waiter ran at %s, before the holder's leases expired (%s)",
			st.ModTime().Format(time.StampMilli), heldUntil.Format(time.StampMilli))
	}
}

// holderExpiry reads the host store for the leases agent holds and
// returns when the earliest of them stops being held (ExpiresAt+Grace).
func holderExpiry(t *testing.T, agent string) time.Time {
	t.Helper()
	h, err := lease.OpenHost(lease.DefaultHostDir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ls, err := h.List(context.Background(), lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var until time.Time
	for _, l := range ls {
		if l.Holder.Agent == agent && (until.IsZero() || l.ExpiresAt.Add(l.Grace).Before(until)) {
			until = l.ExpiresAt.Add(l.Grace)
		}
	}
	if until.IsZero() {
		t.Fatalf("the host store lists no lease of %s after its klock was killed: %+v", agent, ls)
	}
	return until
}

// TestInterruptWhileWaitingForLeases: Ctrl-C of a klock run that waits
// for another session's leases is an interruption (exit 130), and nothing
// of it ran.
func TestInterruptWhileWaitingForLeases(t *testing.T) {
	testutil.RequirePrivileged(t)
	w := harness.NewWorld(t)
	m := filepath.Join(filepath.Dir(w.Workdir), "m.yaml")
	if err := os.WriteFile(m, []byte(harness.ManifestYAML(w.Workdir, policy.ModeStrict, []string{"PROVIDES PROC:" + dash(t),
		"PROVIDES PROC:" + harness.Real(t, "/bin/sleep"), "MUTATES FILE:" + w.Workdir + "/**", "PROVIDES FILE:" + w.Workdir + "/**"})), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{daemon.SocketEnv + "=" + filepath.Join(t.TempDir(), "none.sock")}
	a := startKlockRun(t, env, "-m", m, "-q", "--", "/bin/sh", "-c", "echo up; exec sleep 600")
	if line := a.line(t); line != "up" {
		t.Fatalf("the holder: %q\n%s", line, a.stderr.String())
	}
	defer a.cmd.Process.Signal(syscall.SIGTERM)
	b := startKlockRun(t, env, "-m", m, "--wait", "60s", "--", "/bin/sh", "-c", "echo ran > ran.txt")
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(b.stderr.String(), "waiting for session"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the waiter says nothing of waiting:\n%s", b.stderr.String())
		}
	}
	b.cmd.Process.Signal(syscall.SIGINT)
	if code := b.wait(t); code != 130 || !strings.Contains(b.stderr.String(), "interrupted before the agent started") {
		t.Fatalf("Ctrl-C while waiting: exit %d, want 130 saying nothing ran\n%s", code, b.stderr.String())
	}
	if w.Exists(w.W("ran.txt")) {
		t.Fatal("the interrupted session ran")
	}
}

// startKlockdProcess runs a real klockd (beside klockBinary) on a socket
// of the test's, waits until it listens, and kills it at the end; the
// caller may kill it sooner (a crash).
func startKlockdProcess(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	klockd := filepath.Join(filepath.Dir(klockBinary(t)), "klockd")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "klockd.sock")
	d := exec.Command(klockd, "--socket", sock, "--no-api")
	stderr := &testutil.SyncBuffer{}
	d.Stderr = stderr
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return d, sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("klockd did not listen on %s\n%s", sock, stderr.String())
		}
	}
}
