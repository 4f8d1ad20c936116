//go:build linux

package e2e

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

var (
	klockOnce sync.Once
	klockPath string
	klockErr  error
)

// klockBinary builds klock, klock-stage2 and klockd from this tree once
// for the package, in a directory root can run them from; $KLOCK_BIN names
// a klock already built, with klock-stage2 and klockd beside it (the VM
// suite, which has no Go toolchain).
func klockBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KLOCK_BIN"); p != "" {
		return p
	}
	if _, err := exec.LookPath("go"); err != nil {
		testutil.Unavailable(t, "no go toolchain to build klock")
	}
	klockOnce.Do(func() {
		dir, err := os.MkdirTemp("", "klock-e2e-bin-")
		if err != nil {
			klockErr = err
			return
		}
		if _, klockErr = testutil.Build(dir, "klock-stage2"); klockErr != nil {
			return
		}
		if _, klockErr = testutil.Build(dir, "klockd"); klockErr != nil {
			return
		}
		klockPath, klockErr = testutil.Build(dir, "klock")
	})
	if klockErr != nil {
		t.Fatal(klockErr)
	}
	return klockPath
}

// klockRun is one real `klock run` process.
type klockRun struct {
	cmd    *exec.Cmd
	lines  chan string // the agent's stdout, a line each, closed at its end
	stdin  interface{ Close() error }
	stderr *testutil.SyncBuffer
	done   chan struct{}
	code   int
}

func startKlockRun(t *testing.T, env []string, args ...string) *klockRun {
	t.Helper()
	cmd := exec.Command(klockBinary(t), append([]string{"run"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &klockRun{cmd: cmd, lines: make(chan string, 1024), stdin: stdin, stderr: &testutil.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		// One reader of stdout, to its end (Wait closes the pipe): the
		// test takes the lines from r.lines.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case r.lines <- sc.Text():
			default: // nobody reads that many: drop
			}
		}
		close(r.lines)
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-r.done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
		}
	})
	return r
}

// line is the agent's next line of output ("" when it ended first).
func (r *klockRun) line(t *testing.T) string {
	t.Helper()
	select {
	case l := <-r.lines:
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("no line from the agent in 60s\n%s", r.stderr.String())
		return ""
	}
}

func (r *klockRun) wait(t *testing.T) int {
	t.Helper()
	r.stdin.Close()
	select {
	case <-r.done:
	case <-time.After(90 * time.Second):
		r.cmd.Process.Kill()
		t.Fatalf("klock run did not end\n%s", r.stderr.String())
	}
	return r.code
}

// TestTwoKlockRunsShareAWorkdir (real `klock run` processes): two sessions in one workdir with disjoint MUTATES
// scopes run at the same time and both exit 0 with both changes present;
// one whose scope overlaps the first's exits 75 naming it; with --wait
// 30s it says whom it waits for, starts when the first ends, and exits 0.
//
// Through klockd and embedded alike the sessions share the host's lease
// store (session.HostLeases).
func TestTwoKlockRunsShareAWorkdir(t *testing.T) {
	testutil.RequirePrivileged(t)
	t.Run("through klockd", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		sock := filepath.Join(dir, "klockd.sock")
		srv, err := daemon.Listen(daemon.Config{Socket: sock, Backends: harness.Shared(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve()
		defer srv.Shutdown(context.Background())
		twoKlockRuns(t, []string{daemon.SocketEnv + "=" + sock}, nil)
	})
	t.Run("embedded", func(t *testing.T) {
		twoKlockRuns(t, []string{daemon.SocketEnv + "=" + filepath.Join(t.TempDir(), "no-klockd.sock")}, []string{"--no-daemon"})
	})
}

func twoKlockRuns(t *testing.T, env, flags []string) {
	w := harness.NewWorld(t)
	w.File(w.W("a", "x"), "a v1\n")
	w.File(w.W("b", "y"), "b v1\n")
	manifest := func(name string, intents ...string) string {
		data := strings.Replace(harness.ManifestYAML(w.Workdir, policy.ModeStrict, append([]string{"PROVIDES PROC:" + dash(t)}, intents...)),
			"agent: {id: klock-e2e}", "agent: {id: "+name+"}", 1)
		p := filepath.Join(filepath.Dir(w.Workdir), name+".yaml")
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	scope := func(d string) []string {
		return []string{"MUTATES FILE:" + w.W(d) + "/**", "PROVIDES FILE:" + w.W(d) + "/**"}
	}
	ma, mb := manifest("agent-a", scope("a")...), manifest("agent-b", scope("b")...)
	mc := manifest("agent-c", "MUTATES FILE:"+w.Workdir+"/**", "PROVIDES FILE:"+w.Workdir+"/**")
	args := func(m string, more ...string) []string {
		return append(append(append([]string{"-m", m}, flags...), more...), "--", "/bin/sh", "-c")
	}

	a := startKlockRun(t, env, append(args(ma, "-q"), "echo 'a v2' > a/x; echo up; read go || :")...)
	if line := a.line(t); line != "up" {
		t.Fatalf("klock run a: %q (exit %d)\n%s", line, a.wait(t), a.stderr.String())
	}
	sessions, err := os.ReadDir(w.W(".klock", "sessions"))
	if err != nil || len(sessions) != 1 {
		t.Fatalf("sessions of the workdir: %v %v", sessions, err)
	}
	aID := sessions[0].Name()

	b := startKlockRun(t, env, append(args(mb, "-q"), "echo 'b v2' > b/y")...)
	if code := b.wait(t); code != 0 {
		t.Fatalf("klock run b beside a: exit %d\n%s", code, b.stderr.String())
	}
	if got := w.Content(w.W("a", "x")) + w.Content(w.W("b", "y")); got != "a v2\nb v2\n" {
		t.Fatalf("while a runs, after b: %q", got)
	}

	c := startKlockRun(t, env, append(args(mc, "-q"), "echo c > c.txt")...)
	if code := c.wait(t); code != 75 {
		t.Fatalf("klock run c over a's scope: exit %d, want 75\n%s", code, c.stderr.String())
	}
	for _, want := range []string{"session " + aID + " (agent agent-a) holds ", " FILE:" + w.W("a") + "/**", "this session's intent ", "--wait", "klock kill " + aID} {
		if !strings.Contains(c.stderr.String(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, c.stderr.String())
		}
	}
	if w.Exists(w.W("c.txt")) {
		t.Fatal("the refused session ran")
	}

	waiting := startKlockRun(t, env, append(args(mc, "--wait", "30s"), "echo c > c.txt")...)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(waiting.stderr.String(), "waiting for session "+aID+" (agent agent-a)") {
		if time.Now().After(deadline) {
			t.Fatalf("no progress line from klock run --wait:\n%s", waiting.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if w.Exists(w.W("c.txt")) {
		t.Fatal("the waiting session ran while a held its scope")
	}
	if code := a.wait(t); code != 0 {
		t.Fatalf("klock run a: exit %d\n%s", code, a.stderr.String())
	}
	if code := waiting.wait(t); code != 0 {
		t.Fatalf("klock run --wait: exit %d\n%s", code, waiting.stderr.String())
	}
	if got := w.Content(w.W("c.txt")); got != "c\n" {
		t.Fatalf("c.txt = %q after the waiting session", got)
	}

	// klock kill ends a session: through klockd at once, embedded through
	// its leases (revoked; its heartbeat, every third of a 3 s TTL, sees
	// it). Its klock run exits 130 and strict mode rolled it back.
	before := w.Content(w.W("a", "x"))
	d := startKlockRun(t, env, append(args(ma, "-q", "--lease-ttl", "3s"), "echo 'a v3' > a/x; echo up; read go || :")...)
	if line := d.line(t); line != "up" {
		t.Fatalf("klock run d: %q\n%s", line, d.stderr.String())
	}
	dID := newest(t, w.W(".klock", "sessions"))
	kill := exec.Command(klockBinary(t), "kill", dID)
	kill.Env = append(os.Environ(), env...)
	if out, err := kill.CombinedOutput(); err != nil {
		t.Fatalf("klock kill %s: %v\n%s", dID, err, out)
	}
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the killed session runs on\n%s", d.stderr.String())
	}
	if code := d.wait(t); code != 130 {
		t.Fatalf("klock run of a killed session: exit %d, want 130\n%s", code, d.stderr.String())
	}
	if got := w.Content(w.W("a", "x")); got != before {
		t.Fatalf("a/x = %q after the kill, want %q back", got, before)
	}
}

// newest is the name of the newest entry of dir (session ids sort by time).
func newest(t *testing.T, dir string) string {
	t.Helper()
	var name string
	var at time.Time
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.ModTime().After(at) {
			name, at = e.Name(), info.ModTime()
		}
	}
	return name
}

// On a host whose klockd shares its leases with a fleet, an embedded run
// takes its leases in the fleet's store (deciding from this host's journal
// alone would be blind to the other hosts). With the fleet's etcd
// unreachable nothing is granted: the run is refused before anything
// runs, in bounded time, naming the cluster and what to check.
func TestEmbeddedRunInAnUnreachableFleet(t *testing.T) {
	w := harness.NewWorld(t)
	marker := filepath.Join(t.TempDir(), "fleet.json")
	if err := os.WriteFile(marker, []byte(`{"endpoints":["http://127.0.0.1:1"],"prefix":"/klock","host":"host-a"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	m := filepath.Join(filepath.Dir(w.Workdir), "m.yaml")
	data := harness.ManifestYAML(w.Workdir, policy.ModeStrict, []string{"PROVIDES PROC:" + dash(t), "MUTATES FILE:" + w.Workdir + "/**", "PROVIDES FILE:" + w.Workdir + "/**"})
	if err := os.WriteFile(m, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"KLOCK_FLEET_MARKER=" + marker, daemon.SocketEnv + "=" + filepath.Join(t.TempDir(), "no-klockd.sock")}
	r := startKlockRun(t, env, "-m", m, "--no-daemon", "--", "/bin/sh", "-c", "echo ran > ran.txt")
	if code := r.wait(t); code == 0 {
		t.Fatalf("an embedded run ran without the fleet's etcd:\n%s", r.stderr.String())
	}
	for _, want := range []string{"etcd unavailable", "http://127.0.0.1:1", "endpoint health"} {
		if !strings.Contains(r.stderr.String(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, r.stderr.String())
		}
	}
	if strings.Contains(r.stderr.String(), `"level"`) {
		t.Errorf("the etcd client's own log reached the terminal:\n%s", r.stderr.String())
	}
	if w.Exists(w.W("ran.txt")) {
		t.Fatal("the refused session ran")
	}
}
