//go:build linux

package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/detect"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// childEnv runs this test binary as a session's process: "stage" is the
// first exec in the cgroup (klock's stage 2 in a real session), which execs
// itself again as "agent", the first process the rules judge.
const childEnv = "KLOCK_LSM_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "stage":
		os.Setenv(childEnv, "agent")
		err := syscall.Exec("/proc/self/exe", os.Args, os.Environ())
		fmt.Fprintln(os.Stderr, "re-exec:", err)
		os.Exit(2)
	case "agent":
		os.Exit(agent(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// agent performs "op:path[>path2]" steps and prints "step=ok|ERRNO".
func agent(steps []string) int {
	for _, s := range steps {
		op, arg, _ := strings.Cut(s, ":")
		a, b, _ := strings.Cut(arg, ">")
		var err error
		switch op {
		case "read":
			_, err = os.ReadFile(a)
		case "write":
			err = os.WriteFile(a, []byte("changed\n"), 0o644)
		case "create":
			var f *os.File
			if f, err = os.OpenFile(a, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
				f.Close()
			}
		case "unlink":
			err = os.Remove(a)
		case "rename":
			err = os.Rename(a, b)
		case "link":
			err = os.Link(a, b)
		case "chmod":
			err = os.Chmod(a, 0o777)
		case "utimes":
			err = unix.UtimesNano(a, []unix.Timespec{{Sec: 1}, {Sec: 1}})
		case "setxattr":
			err = unix.Setxattr(a, "user.klock", []byte("x"), 0)
		case "exec":
			err = exec.Command(a).Run()
		case "pidfd": // a handle on this process (pidfs from 6.9: opened through file_open)
			var fd int
			if fd, err = unix.PidfdOpen(os.Getpid(), 0); err == nil {
				unix.Close(fd)
			}
		case "waitgone": // until a is gone (a hang guard, not a timing)
			for deadline := time.Now().Add(20 * time.Second); err == nil; {
				if _, err = os.Lstat(a); err == nil && time.Now().After(deadline) {
					err = errors.New("still there")
					break
				}
				time.Sleep(time.Millisecond)
			}
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
		case "openclose": // a loop of N open+close of a; prints ns per pair
			var n int
			if n, err = strconv.Atoi(b); err == nil {
				var ns int64
				if ns, err = openCloseLoop(a, n); err == nil {
					fmt.Printf("%s=%d\n", s, ns)
					continue
				}
			}
		case "uring-read":
			var fd int
			if fd, err = testutil.IOURingOpenat(a, unix.O_RDONLY); err == nil {
				unix.Close(fd)
			}
		case "uring-stress": // n rounds of io_uring writes and renames of a; prints how many had an effect
			var n int
			if n, err = strconv.Atoi(b); err == nil {
				fmt.Printf("%s=%d\n", s, uringStress(a, n))
				continue
			}
		case "uring-write":
			var fd int
			if fd, err = testutil.IOURingOpenat(a, unix.O_WRONLY|unix.O_TRUNC); err == nil {
				unix.Close(fd)
			}
		}
		res := "ok"
		var errno syscall.Errno
		if errors.As(err, &errno) {
			res = unix.ErrnoName(errno)
		} else if err != nil {
			res = err.Error()
		}
		fmt.Printf("%s=%s\n", s, res)
	}
	return 0
}

// requireLSM loads the backend where the probe says it works. Elsewhere
// (this repository's CI host) it asserts that Load refuses, and ends the
// test: the enforcement it needs does not exist on that kernel, which
// TestLoadMatchesTheProbe pins.
func requireLSM(t testing.TB) *LSM {
	t.Helper()
	testutil.RequirePrivileged(t)
	probe := detect.BPFLSM()
	if !probe.OK {
		if os.Getenv("KLOCK_TEST_BACKEND") == "bpf-lsm" {
			t.Fatalf("bpf-lsm forced but unavailable: %s", probe.Why)
		}
		if l, err := Load(); err == nil {
			l.Close()
			t.Fatal("Load succeeded where the probe fails")
		}
		t.Logf("bpf-lsm unavailable here (%s): Load refuses, as it must; the VM harness runs the enforcement", probe.Why)
		return nil
	}
	l, err := Load()
	if err != nil {
		t.Fatalf("Load: %+v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// agentSession attaches a session with intents (and PROVIDES PROC of this
// binary, which becomes the agent) to a new cgroup; agent returns the
// command that runs steps in it as nobody, and its combined output.
// Everything is undone at the end of the test.
func agentSession(t testing.TB, l *LSM, intents ...string) (*Session, *cgroup.Group, func(steps ...string) (*exec.Cmd, *bytes.Buffer)) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.Parse("lsm.yaml", []byte(testutil.ManifestYAML("lsm-test", "strict", "", append(intents, "PROVIDES PROC:"+self)...)))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cgroup.Create(fmt.Sprintf("lsm-test-%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Delete() })
	s, err := l.Attach(g.ID, rs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cgfd, err := g.OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cgfd.Close() })
	return s, g, func(steps ...string) (*exec.Cmd, *bytes.Buffer) {
		out := &bytes.Buffer{}
		cmd := exec.Command(self, steps...)
		cmd.Env = append(os.Environ(), childEnv+"=stage")
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cgfd.Fd()),
			Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		return cmd, out
	}
}

// TestEnforcesBeforeTheEffect runs a real process tree in a real cgroup
// under compiled rules and checks every refusal's errno, that nothing
// changed on disk, what the kernel reported, and that io_uring operations
// are decided by the same hooks.
func TestEnforcesBeforeTheEffect(t *testing.T) {
	l := requireLSM(t)
	if l == nil {
		return
	}
	dir := agentWorld(t)
	w := func(n ...string) string { return filepath.Join(append([]string{dir}, n...)...) }
	for _, d := range []string{"work", "work/rw", "outside"} {
		os.MkdirAll(w(d), 0o755)
	}
	files := map[string]string{"work/ro.txt": "ro\n", "work/rw/mine.txt": "mine\n", "outside/secret.txt": "secret\n"}
	for p, c := range files {
		if err := os.WriteFile(w(p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rw := w("work", "rw") + "/**"
	s, g, agent := agentSession(t, l,
		"CONSUMES FILE:"+w("work")+"/**",
		"MUTATES FILE:"+rw, "PROVIDES FILE:"+rw, "DELETES FILE:"+rw, "RENAMES FILE:"+rw)

	steps := []string{
		"read:" + w("work", "ro.txt"),
		"read:" + w("outside", "secret.txt"),
		"write:" + w("work", "ro.txt"),
		"write:" + w("work", "rw", "mine.txt"),
		"create:" + w("work", "new.txt"),
		"create:" + w("work", "rw", "new.txt"),
		"write:" + w("work", "rw", "new.txt"),
		"unlink:" + w("work", "ro.txt"),
		"chmod:" + w("work", "ro.txt"),
		"link:" + w("work", "ro.txt") + ">" + w("work", "rw", "ro-link"),
		"rename:" + w("work", "rw", "mine.txt") + ">" + w("work", "ro.txt"),
		"exec:/bin/true",
		"utimes:" + w("work", "ro.txt"),
		"utimes:" + w("work", "rw", "new.txt"),
		"setxattr:" + w("outside", "secret.txt"),
		"uring-read:" + w("work", "ro.txt"),
		"uring-read:" + w("outside", "secret.txt"),
		"uring-write:" + w("work", "ro.txt"),
		"pidfd:self",
	}
	// The link would give ro.txt's inode MUTATES by its new name: refused
	// with EXDEV, Landlock's answer to its REFER rule, so tools copy.
	want := []string{"ok", "EPERM", "EPERM", "ok", "EPERM", "ok", "ok", "EPERM", "EPERM", "EXDEV", "EPERM", "EPERM",
		"EPERM", "ok", "EPERM", "ok", "EPERM", "EPERM", "ok"}

	cmd, out := agent(steps...)
	// The agent owns the world, so only the rules stand in its way.
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	if err := cmd.Run(); err != nil {
		t.Fatalf("agent: %v\n%s", err, out.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	for i, st := range steps {
		if got[st] != want[i] {
			t.Errorf("%s = %q, want %s", st, got[st], want[i])
		}
	}
	// Nothing the rules refused happened.
	for p, c := range map[string]string{"work/ro.txt": "ro\n", "outside/secret.txt": "secret\n"} {
		if b, _ := os.ReadFile(w(p)); string(b) != c {
			t.Errorf("%s = %q, want %q untouched", p, b, c)
		}
	}
	if st, _ := os.Stat(w("work", "ro.txt")); st == nil || st.Mode().Perm() != 0o644 || st.ModTime().Unix() == 1 {
		t.Errorf("ro.txt mode or mtime changed: %v", st)
	}
	if n, _ := unix.Getxattr(w("outside", "secret.txt"), "user.klock", nil); n > 0 {
		t.Error("secret.txt got an xattr")
	}
	for _, p := range []string{"work/new.txt", "work/rw/ro-link"} {
		if _, err := os.Lstat(w(p)); err == nil {
			t.Errorf("%s exists", p)
		}
	}
	// This process is not in the cgroup: the rules do not apply to it.
	if _, err := os.ReadFile(w("outside", "secret.txt")); err != nil {
		t.Errorf("the test process itself was refused: %v", err)
	}

	// What the kernel reported: the refused read and io_uring write by
	// their kernel paths, and an allowed read.
	deadline := time.After(5 * time.Second)
	seen := map[string]event.Event{}
	for len(seen) < 3 {
		select {
		case ev := <-s.Events():
			k := ev.Triple.String()
			if _, dup := seen[k]; !dup && (k == "CONSUMES FILE:"+w("outside", "secret.txt") || k == "MUTATES FILE:"+w("work", "ro.txt") || k == "CONSUMES FILE:"+w("work", "ro.txt")) {
				seen[k] = ev
			}
		case <-deadline:
			t.Fatalf("events seen: %v", seen)
		}
	}
	if ev := seen["CONSUMES FILE:"+w("outside", "secret.txt")]; !ev.Blocked || ev.Errno != int32(unix.EPERM) || ev.Source != event.SourceLSM {
		t.Errorf("secret read event %+v, want blocked EPERM from bpf-lsm", ev)
	}
	if ev := seen["CONSUMES FILE:"+w("work", "ro.txt")]; ev.Blocked {
		t.Errorf("allowed read reported blocked: %+v", ev)
	}
	// ro.txt was opened for reading twice (read, then through io_uring):
	// one record, and the kernel counted the other.
	flush(t, l)
	// Repeats stands for the one unreported open: one event, Repeat 0.
	var repeats uint64
	reps, err := s.Repeats()
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range reps {
		if ev.Triple.String() == "CONSUMES FILE:"+w("work", "ro.txt") {
			repeats += 1 + ev.Repeat
		}
	}
	if repeats != 1 {
		t.Errorf("repeats counted for the ro.txt reads = %d, want 1", repeats)
	}
	// Closing the session leaves nothing of it in the kernel's maps.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var sess lsmKlsmSession
	if err := l.objs.LsmSessions.Lookup(g.ID, &sess); err == nil {
		t.Error("the session's entry outlived Close")
	}
	var sk lsmKlsmSeenKey
	var n uint64
	for it := l.objs.LsmSeen.Iterate(); it.Next(&sk, &n); {
		if sk.Cgid == g.ID {
			t.Fatal("counted opens outlived Close")
		}
	}
	var ck lsmKlsmCreated
	var one uint8
	for it := l.objs.LsmCreated.Iterate(); it.Next(&ck, &one); {
		if ck.Cgid == g.ID {
			t.Fatal("created files outlived Close")
		}
	}
}

// TestCacheForgetsOutsideRenames: a file the agent has read is renamed by
// a process outside the session; the agent's reads of the new name are
// decided and reported under the new name, not counted as repeats of the
// old one (the cache is keyed by the dentry, which a rename keeps).
func TestCacheForgetsOutsideRenames(t *testing.T) {
	l := requireLSM(t)
	if l == nil {
		return
	}
	dir := agentWorld(t)
	a, b, ready := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "ready")
	if err := os.WriteFile(a, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _, agent := agentSession(t, l, "CONSUMES FILE:"+dir+"/**", "PROVIDES FILE:"+ready)
	steps := []string{"read:" + a, "read:" + a, "create:" + ready, "waitgone:" + a, "read:" + b, "read:" + b}
	cmd, out := agent(steps...)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the agent never got ready:\n%s", out.String())
		}
	}
	if err := os.Rename(a, b); err != nil { // by this process: outside the session
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent: %v\n%s", err, out.String())
	}
	for _, st := range steps {
		if !strings.Contains(out.String(), st+"=ok") {
			t.Fatalf("step %s did not succeed:\n%s", st, out.String())
		}
	}
	opens := map[string]uint64{}
	count := func(ev event.Event) {
		if ev.Triple.Predicate == policy.Consumes && (ev.Triple.Path == a || ev.Triple.Path == b) {
			opens[ev.Triple.Path] += 1 + ev.Repeat
		}
	}
	// The first read of each name is reported (a is before the fix too);
	// wait for both, with a hang guard.
	deadline := time.After(5 * time.Second)
	for opens[a] == 0 || opens[b] == 0 {
		select {
		case ev := <-s.Events():
			count(ev)
		case <-deadline:
			t.Fatalf("reads reported: %v; want a record under each of %s and %s", opens, a, b)
		}
	}
	flush(t, l)
	reps, err := s.Repeats()
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range reps {
		count(ev)
	}
	if opens[a] != 2 || opens[b] != 2 {
		t.Errorf("reads logged: %d under %s, %d under %s; want 2 and 2", opens[a], a, opens[b], b)
	}
}

// agentWorld is a temporary directory the agent (nobody) can traverse
// to: DAC is not the wall under test.
func agentWorld(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// flush waits until every record the kernel produced has reached its
// session's channel (the channels have room: nothing else reads them).
func flush(t *testing.T, l *LSM) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}
