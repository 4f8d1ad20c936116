//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

func agentUser() *launch.Credential { return &launch.Credential{UID: agentUID, GID: agentUID} }

// outFile is a file the agent's stdout goes to, read back by the test.
func outFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stdout-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readBack(t *testing.T, f *os.File) string {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRunThroughDaemon: a session run by klockd returns the agent's exit
// status, its output reached the client's own stdout descriptor (passed by
// SCM_RIGHTS), and the verification log was written and returned.
func TestRunThroughDaemon(t *testing.T) {
	s := startServer(t, Config{})
	_, mpath, data := manifest(t, policy.ModePermissive)
	m, err := policy.Parse(mpath, data)
	if err != nil {
		t.Fatal(err)
	}
	out := outFile(t)
	res, used, err := RunViaDaemon(context.Background(), s.Addr(), session.Options{
		Manifest: m, ManifestPath: mpath, ManifestData: data, User: agentUser(), AllowDegraded: true,
		Command: []string{"/bin/sh", "-c", "echo hello from the agent; exit 7"}, Env: []string{"PATH=/usr/bin:/bin"},
		Stdout: out, Stderr: out,
	})
	if !used || err != nil {
		t.Fatalf("used %v, err %v", used, err)
	}
	if res.Exit.Code != 7 || res.Exit.Signal != 0 || res.Killed {
		t.Fatalf("exit %v killed %v reason %q, want exit status 7", res.Exit, res.Killed, res.Reason)
	}
	if got := readBack(t, out); !strings.Contains(got, "hello from the agent") {
		t.Fatalf("agent stdout %q", got)
	}
	if res.Log == nil || res.Log.Exit.Code == nil || *res.Log.Exit.Code != 7 || res.Log.Session != res.ID {
		t.Fatalf("returned log: %+v", res.Log)
	}
	onDisk, err := vlog.Read(res.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if onDisk.Session != res.ID || onDisk.Agent != "daemon-test" || onDisk.Events == 0 {
		t.Fatalf("log on disk: session %q agent %q events %d", onDisk.Session, onDisk.Agent, onDisk.Events)
	}
	if len(res.Learned) == 0 {
		t.Error("permissive run returned no learned manifest")
	}
	if len(s.Sessions()) != 0 {
		t.Errorf("sessions left in the registry: %v", s.Sessions())
	}
	// The shared backends outlive a session: a second one is observed too.
	res2, used, err := RunViaDaemon(context.Background(), s.Addr(), session.Options{
		Manifest: m, ManifestPath: mpath, ManifestData: data, User: agentUser(), AllowDegraded: true,
		Command: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"},
	})
	if !used || err != nil || res2.Exit.Code != 0 || res2.Log == nil || res2.Log.Events == 0 || res2.ID == res.ID {
		t.Fatalf("second session: used %v err %v res %+v", used, err, res2)
	}
	if b := s.Backends(); b.Observer == nil {
		t.Fatal("shared observer gone after sessions")
	}
}

// TestStrictViolationThroughDaemon: a strict kill crosses the socket as a
// Killed result with the typed ScopeViolationError.
func TestStrictViolationThroughDaemon(t *testing.T) {
	s := startServer(t, Config{})
	wd, mpath, data := manifest(t, policy.ModeStrict)
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := cl.Run(context.Background(), &Run{RunRequest: RunRequest{
		Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID, AllowDegraded: true,
		Argv: []string{"/bin/sh", "-c", "echo x > " + wd + "/undeclared; sleep 5"}, Env: []string{"PATH=/usr/bin:/bin"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var sv *policy.ScopeViolationError
	if !res.Killed || !errors.As(res.Violation, &sv) {
		t.Fatalf("killed %v violation %T %v", res.Killed, res.Violation, res.Violation)
	}
	if sv.Triple.Path != filepath.Join(wd, "undeclared") {
		t.Errorf("violation %v", sv)
	}
	t.Log(sv)
}

// TestPSAndKill: ps lists a running session with its agent's pid; kill
// ends it and its run returns Killed with the reason.
func TestPSAndKill(t *testing.T) {
	s := startServer(t, Config{})
	_, mpath, data := manifest(t, policy.ModePermissive)
	type ran struct {
		res *session.Result
		err error
	}
	done := make(chan ran, 1)
	started := make(chan SessionInfo, 1)
	go func() {
		cl, err := Dial(s.Addr())
		if err != nil {
			done <- ran{nil, err}
			return
		}
		defer cl.Close()
		res, err := cl.Run(context.Background(), &Run{
			RunRequest: RunRequest{Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID, AllowDegraded: true,
				Argv: []string{"/bin/sleep", "60"}, Env: []string{"PATH=/usr/bin:/bin"}},
			Started: func(i SessionInfo) { started <- i },
		})
		done <- ran{res, err}
	}()
	var id string
	select {
	case i := <-started:
		id = i.ID
	case r := <-done:
		t.Fatalf("run ended before it started: %+v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("no started message")
	}

	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var info SessionInfo
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := cl.PS()
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 && list[0].State == StateRunning {
			info = list[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ps never showed the session running: %+v", list)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if info.ID != id || info.Agent != "daemon-test" || info.PID == 0 || policy.Mode(info.Mode) != policy.ModePermissive || info.UID != 0 ||
		strings.Join(info.Command, " ") != "/bin/sleep 60" {
		t.Fatalf("ps: %+v", info)
	}
	if info.Network != nil {
		t.Errorf("ps shows network traffic of a session without NET intents: %+v", info.Network)
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", info.PID)); strings.TrimSpace(string(comm)) != "sleep" {
		t.Errorf("pid %d is %q, want the agent (sleep)", info.PID, comm)
	}

	if err := cl.Kill("no-such-session"); !errors.Is(err, ErrNoSession) {
		t.Errorf("kill of an unknown session: %v, want ErrNoSession", err)
	}
	start := time.Now()
	if err := cl.Kill(id); err != nil {
		t.Fatal(err)
	}
	var r ran
	select {
	case r = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the killed session did not end")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.res.Killed || !r.res.Interrupted || r.res.Violation != nil || r.res.Exit.Signal != syscall.SIGKILL || !strings.Contains(r.res.Reason, "klock kill") {
		t.Fatalf("killed %v interrupted %v violation %v exit %v reason %q, want an interruption by klock kill", r.res.Killed, r.res.Interrupted, r.res.Violation, r.res.Exit, r.res.Reason)
	}
	t.Logf("kill ended the session in %v: %s", time.Since(start).Round(time.Millisecond), r.res.Reason)
	if list, err := cl.PS(); err != nil || len(list) != 0 {
		t.Errorf("ps after kill: %v %v", list, err)
	}
}

// TestClientCancelKills: a client whose context ends (klock run got SIGINT)
// has its session killed, and still gets the Killed result.
func TestClientCancelKills(t *testing.T) {
	s := startServer(t, Config{})
	_, mpath, data := manifest(t, policy.ModePermissive)
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	// Cancel once the agent itself runs (it says so on its stdout), not
	// merely once klockd accepted the session: a cancel during set-up
	// rightly ends in an error, not a killed session.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	go func() {
		buf := make([]byte, 6)
		if _, err := io.ReadFull(pr, buf); err == nil && string(buf) == "ready\n" {
			cancel(errors.New("klock run got SIGINT"))
		}
	}()
	res, err := cl.Run(ctx, &Run{
		RunRequest: RunRequest{Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID, AllowDegraded: true,
			Argv: []string{"/bin/sh", "-c", "echo ready; exec sleep 60"}, Env: []string{"PATH=/usr/bin:/bin"}},
		Stdout: pw,
	})
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !res.Killed || !res.Interrupted || !strings.Contains(res.Reason, "SIGINT") {
		t.Fatalf("killed %v interrupted %v reason %q, want an interruption", res.Killed, res.Interrupted, res.Reason)
	}
}

// helper runs the test binary as a klockd client with the given
// credentials (and cgroup), and returns klockd's answer.
func helper(t *testing.T, socket, req string, attr *syscall.SysProcAttr) helperReply {
	t.Helper()
	// The test binary's directory is 0700: copy it where any uid can run it.
	bin, err := testutil.CopySelf(testutil.OpenDir(t, -1), "client")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{envHelper + "=" + req, envHelperSocket + "=" + socket}
	cmd.SysProcAttr = attr
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, stderr.String())
	}
	var r helperReply
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	return r
}

// TestRefusesNonMember: a peer that is neither root nor in the klock group
// (here the group is "nogroup", gid 65534, so the allowed case can be
// shown too) is refused with ErrForbidden by the SO_PEERCRED check, even
// though the socket file lets it connect; a member may use klockd but not
// run an agent as another uid.
func TestRefusesNonMember(t *testing.T) {
	s := startServer(t, Config{Group: "nogroup", SocketMode: 0o666})
	if !s.hasGroup || s.gid != 65534 {
		testutil.Unavailable(t, "this host has no group nogroup with gid 65534")
	}
	stranger := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 12345, Groups: []uint32{}}}
	if r := helper(t, s.Addr(), "ps", stranger); r.OK || r.Class != ClassForbidden {
		t.Fatalf("uid 65534 gid 12345: %+v, want forbidden", r)
	} else {
		t.Logf("refused: %s", r.Message)
	}
	member := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 12345, Groups: []uint32{65534}}}
	if r := helper(t, s.Addr(), "ps", member); !r.OK {
		t.Fatalf("member of nogroup (supplementary): %+v, want allowed", r)
	}
	if r := helper(t, s.Addr(), "run-as-root", member); r.OK || r.Class != ClassForbidden {
		t.Fatalf("member running an agent as root: %+v, want forbidden", r)
	} else {
		t.Logf("refused: %s", r.Message)
	}
}

// TestRefusesPeerInSessionCgroup: a root peer inside a klock session
// cgroup (as an agent run with --user 0 would be) is refused.
func TestRefusesPeerInSessionCgroup(t *testing.T) {
	s := startServer(t, Config{})
	g, err := cgroup.Create(session.NewID(time.Now()) + "-peer")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Delete()
	fd, err := g.OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	in := &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	r := helper(t, s.Addr(), "ps", in)
	if r.OK || r.Class != ClassForbidden || !strings.Contains(r.Message, "session cgroup") {
		t.Fatalf("root peer in %s: %+v, want forbidden", g.Path, r)
	}
	t.Logf("refused: %s", r.Message)
	// The same helper outside any session is served.
	if r := helper(t, s.Addr(), "ps", nil); !r.OK {
		t.Fatalf("root peer outside sessions: %+v", r)
	}
}

func TestWireResultRoundTrip(t *testing.T) {
	sv := &policy.ScopeViolationError{Triple: policy.FileTriple(policy.Mutates, "/etc/hosts"), Declared: policy.Access(1)}
	in := &session.Result{ID: "s1", Exit: launch.Exit{Code: -1, Signal: syscall.SIGKILL}, Killed: true, Reason: "r",
		Violation: sv, LogPath: "/x/verification.json", Log: &vlog.Log{Session: "s1"}, Learned: []byte("y")}
	b, err := json.Marshal(toWire(in, true))
	if err != nil {
		t.Fatal(err)
	}
	var w WireResult
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	out, err := fromWireResult(&w)
	if err != nil {
		t.Fatal(err)
	}
	if out.Violation.Error() != sv.Error() || out.Exit != in.Exit || out.Log.Session != "s1" || string(out.Learned) != "y" || !out.Killed {
		t.Fatalf("round trip: %+v (%v)", out, out.Violation)
	}
}

func TestErrorClasses(t *testing.T) {
	for _, c := range classes {
		e := wireError(fmt.Errorf("wrapped: %w", c.err))
		if e.Class != c.class || !errors.Is(e, c.err) {
			t.Errorf("%v: class %q", c.err, e.Class)
		}
	}
	if e := wireError(errors.New("x")); e.Class != ClassInternal {
		t.Errorf("plain error: %q", e.Class)
	}
}

// TestShutdownKillsSessions: klockd's shutdown (SIGTERM) kills every
// session cleanly: its client still gets the Killed result and log, and
// the socket is removed (checked by startServer's cleanup).
func TestShutdownKillsSessions(t *testing.T) {
	s := startServer(t, Config{})
	_, mpath, data := manifest(t, policy.ModePermissive)
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	shut := make(chan error, 1)
	res, err := cl.Run(context.Background(), &Run{
		RunRequest: RunRequest{Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID, AllowDegraded: true,
			Argv: []string{"/bin/sleep", "60"}, Env: []string{"PATH=/usr/bin:/bin"}},
		Started: func(SessionInfo) {
			// Shut down once the agent itself runs (accepted is earlier:
			// backup and launch take a while on a slow machine).
			go func() {
				for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if ss := s.Sessions(); len(ss) == 1 && ss[0].State == StateRunning {
						break
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				shut <- s.Shutdown(ctx)
			}()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Killed || !strings.Contains(res.Reason, "shutting down") || res.LogPath == "" {
		t.Fatalf("killed %v reason %q log %q", res.Killed, res.Reason, res.LogPath)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(s.Addr()); !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("dial after shutdown: %v, want ErrNoDaemon", err)
	}
}

// TestPSShowsTraffic: a session with a NET intent runs behind its packet
// wall, and ps shows the bytes its agent sent and received (none here).
func TestPSShowsTraffic(t *testing.T) {
	s := startServer(t, Config{})
	_, mpath, data := manifest(t, policy.ModeStrict, "CONSUMES NET:192.0.2.1:443/tcp")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		cl, err := Dial(s.Addr())
		if err != nil {
			done <- err
			return
		}
		defer cl.Close()
		// Not degraded: a session with NET intents without its wall is
		// refused, and says why.
		_, err = cl.Run(ctx, &Run{RunRequest: RunRequest{Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID,
			Argv: []string{"/bin/sleep", "60"}, Env: []string{"PATH=/usr/bin:/bin"}}})
		done <- err
	}()
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		list, err := cl.PS()
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 && list[0].State == StateRunning {
			if list[0].Network == nil {
				t.Errorf("ps: no network traffic for a session with a NET intent: %+v", list[0])
			}
			if err := cl.Kill(list[0].ID); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ps never showed the session running: %+v", list)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the killed session did not end")
	}
}
