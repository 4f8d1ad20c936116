package fleet

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/fleet"
	"github.com/klocklabs/klock/enforcer/leaseapi"
	"github.com/klocklabs/klock/internal/etcdtest"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// host is one klockd process of the fleet, with its own sockets and
// fleet marker (the machine's other state is per session).
type host struct {
	name, dir, sock, api, marker string
	cmd                          *exec.Cmd
}

func (h *host) env() []string {
	return []string{daemon.SocketEnv + "=" + h.sock, fleet.MarkerEnv + "=" + h.marker, leaseapi.SocketEnv + "=" + h.api}
}

func startHost(t *testing.T, bin, name string, c *etcdtest.Cluster) *host {
	t.Helper()
	dir := t.TempDir()
	h := &host{name: name, dir: dir, sock: filepath.Join(dir, "klockd.sock"), api: filepath.Join(dir, "api.sock"), marker: filepath.Join(dir, "fleet.json")}
	h.cmd = exec.Command(filepath.Join(bin, "klockd"), "--socket", h.sock, "--api-socket", h.api, "--store", "etcd",
		"--etcd-endpoints", strings.Join(c.Endpoints(), ","), "--etcd-prefix", "/hosts", "--host-name", name)
	h.cmd.Env = append(os.Environ(), fleet.MarkerEnv+"="+h.marker)
	log, err := os.Create(filepath.Join(dir, "klockd.log"))
	if err != nil {
		t.Fatal(err)
	}
	h.cmd.Stdout, h.cmd.Stderr = log, log
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.kill() })
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(h.api); err == nil {
			return h
		}
		if time.Now().After(end) {
			b, _ := os.ReadFile(filepath.Join(dir, "klockd.log"))
			t.Fatalf("klockd %s did not start:\n%s", name, b)
		}
	}
}

func (h *host) kill() {
	if h.cmd.ProcessState == nil {
		_ = h.cmd.Process.Signal(syscall.SIGKILL)
		_ = h.cmd.Wait()
	}
}

// klockRun is one klock run through a host's klockd.
type klockRun struct {
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer
	done   chan struct{}
}

func (s *klockRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("klock run did not end:\n%s", s.stderr.String())
	}
	return s.cmd.ProcessState.ExitCode()
}

func (s *klockRun) running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

type hostsWorld struct {
	t     *testing.T
	w     *harness.World
	bin   string
	seq   int
	gates int
	gate  string
}

// run starts klock run on h for a manifest changing scope (a path under
// the workdir, "" for all of it): the agent writes its name in the workdir
// and waits for the gate file.
func (hw *hostsWorld) run(h *host, name, scope string, flags ...string) *klockRun {
	t := hw.t
	t.Helper()
	hw.seq++
	dir := hw.w.W(scope)
	data := strings.Replace(harness.ManifestYAML(hw.w.Workdir, policy.ModeStrict, []string{"PROVIDES PROC:" + harness.Real(t, "/bin/sh"),
		"PROVIDES PROC:" + harness.Real(t, "/usr/bin/sleep"), "MUTATES FILE:" + dir + "/**", "PROVIDES FILE:" + dir + "/**"}),
		"agent: {id: klock-e2e}", "agent: {id: "+name+"}", 1)
	m := filepath.Join(filepath.Dir(hw.w.Workdir), fmt.Sprintf("m%d.yaml", hw.seq))
	if err := os.WriteFile(m, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("echo ran > %s/%s.ran; while [ ! -e %s ]; do sleep 0.05; done", dir, name, hw.gate)
	args := append(append([]string{"run", "-q", "-m", m, "--user", "65534", "--lease-ttl", "3s"}, flags...), "--", "/bin/sh", "-c", script)
	s := &klockRun{cmd: exec.Command(filepath.Join(hw.bin, "klock"), args...), stderr: &testutil.SyncBuffer{}, done: make(chan struct{})}
	s.cmd.Env = append(os.Environ(), h.env()...)
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		if s.running() {
			_ = s.cmd.Process.Kill()
		}
	})
	return s
}

// ran waits until agent name wrote its mark in scope.
func (hw *hostsWorld) ran(scope, name string, s *klockRun) {
	hw.t.Helper()
	p := hw.w.W(scope, name+".ran")
	for end := time.Now().Add(60 * time.Second); !hw.w.Exists(p); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) || !s.running() {
			hw.t.Fatalf("agent %s did not run:\n%s", name, s.stderr.String())
		}
	}
}

// open lets every waiting agent end, and makes a new gate for the next.
func (hw *hostsWorld) open() {
	os.WriteFile(hw.gate, nil, 0o644)
	hw.gates++
	hw.gate = filepath.Join(filepath.Dir(hw.gate), fmt.Sprintf("gate%d", hw.gates))
}

func leasesOn(t *testing.T, bin string, h *host) string {
	out, err := exec.Command(filepath.Join(bin, "klock"), "leases", "--socket", h.api).CombinedOutput()
	if err != nil {
		t.Fatalf("klock leases on %s: %v\n%s", h.name, err, out)
	}
	return string(out)
}

// Two klockd processes on one 3-member etcd cluster share their leases:
// overlapping sessions on different hosts obey Wait-Die as on one host
// (the younger dies, or waits when asked to, and runs once the other
// ended), disjoint ones run side by side, klock leases on either host
// lists both hosts' leases with their host, and the leases of a klockd
// killed with SIGKILL are free within their TTL for the other host.
func TestTwoKlockdHosts(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := etcdtest.Start(t, 3)
	bin := harness.KlockBins(t)
	if _, err := os.Stat(filepath.Join(bin, "klockd")); err != nil {
		testutil.BuildCommand(t, bin, "klockd")
	}
	a, b := startHost(t, bin, "host-a", c), startHost(t, bin, "host-b", c)
	w := harness.NewWorld(t)
	w.Dir(w.W("x"))
	w.Dir(w.W("y"))
	hw := &hostsWorld{t: t, w: w, bin: bin, gate: filepath.Join(t.TempDir(), "gate0")}

	// Overlapping: the younger on host b dies at once, or waits.
	a1 := hw.run(a, "a1", "")
	hw.ran("", "a1", a1)
	b1 := hw.run(b, "b1", "")
	if code := b1.wait(t); code != 75 || !strings.Contains(b1.stderr.String(), "on host host-a") {
		t.Fatalf("b1 over a1's scope: exit %d, want 75 naming host-a\n%s", code, b1.stderr.String())
	}
	if w.Exists(w.W("b1.ran")) {
		t.Fatal("b1 ran while a1 held its scope")
	}
	b2 := hw.run(b, "b2", "", "--wait", "60s")
	time.Sleep(time.Second)
	if w.Exists(w.W("b2.ran")) {
		t.Fatal("b2 ran while a1 held its scope")
	}
	hw.open()
	if code := a1.wait(t); code != 0 {
		t.Fatalf("a1: exit %d\n%s", code, a1.stderr.String())
	}
	hw.ran("", "b2", b2)
	hw.open()
	if code := b2.wait(t); code != 0 {
		t.Fatalf("b2 after a1: exit %d\n%s", code, b2.stderr.String())
	}

	// Disjoint: side by side, and both hosts see both.
	ax, by := hw.run(a, "ax", "x"), hw.run(b, "by", "y")
	hw.ran("x", "ax", ax)
	hw.ran("y", "by", by)
	for _, h := range []*host{a, b} {
		out := leasesOn(t, bin, h)
		for _, want := range []string{"HOST", "host-a", "host-b", w.W("x") + "/**", w.W("y") + "/**"} {
			if !strings.Contains(out, want) {
				t.Errorf("klock leases on %s does not show %q:\n%s", h.name, want, out)
			}
		}
	}
	hw.open()
	for _, s := range []*klockRun{ax, by} {
		if code := s.wait(t); code != 0 {
			t.Fatalf("a disjoint session: exit %d\n%s", code, s.stderr.String())
		}
	}

	// klockd a killed: its session's leases run out with their TTL, and
	// host b's waiting session runs.
	ak := hw.run(a, "ak", "")
	hw.ran("", "ak", ak)
	bk := hw.run(b, "bk", "", "--wait", "60s")
	time.Sleep(500 * time.Millisecond)
	if w.Exists(w.W("bk.ran")) {
		t.Fatal("bk ran while ak held its scope")
	}
	a.kill()
	killed := time.Now()
	hw.ran("", "bk", bk)
	t.Logf("host b's session ran %s after klockd a was killed (lease TTL 3s)", time.Since(killed).Round(100*time.Millisecond))
	hw.open()
	if code := bk.wait(t); code != 0 {
		t.Fatalf("bk: exit %d\n%s", code, bk.stderr.String())
	}
}
