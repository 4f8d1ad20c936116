//go:build linux

package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

func probeSpec(t *testing.T, mode string, args ...string) Spec {
	wd := agentDir(t)
	rs := compile(t, wd, "PROVIDES PROC:"+probePath)
	return Spec{Ruleset: rs, Path: probePath, Args: append([]string{"probe"}, args...),
		Env: []string{"KLOCK_LAUNCH_PROBE=" + mode}, NewNetNS: true}
}

// TestAgentIdentity: non-root uid, no capability in any set, no_new_privs,
// seccomp filter mode, pid 1 of its own pid namespace, its own network
// namespace, and in the session cgroup — seen from inside (a cgroup
// namespace rooted at the session group, created by stage 2 before exec)
// and from outside.
func TestAgentIdentity(t *testing.T) {
	testutil.RequirePrivileged(t)
	s := probeSpec(t, "identity")
	s.Group, s.User = newGroup(t), agentUser()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.Stdin, s.Stdout, s.Stderr = stdinR, outW, os.Stderr
	p, err := Start(context.Background(), s)
	stdinR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(outR)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		got[k] = v
		if k == "pid" {
			break // the probe now waits for stdin to close
		}
	}
	// Outside view while the agent is alive.
	hostCg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.Pid))
	if err != nil {
		t.Fatal(err)
	}
	procs, err := s.Group.Procs()
	if err != nil {
		t.Fatal(err)
	}
	stdinW.Close()
	if exit, err := p.Wait(); err != nil || exit != (Exit{}) {
		t.Fatalf("probe: %v %v", exit, err)
	}
	const zero = "0000000000000000"
	for k, want := range map[string]string{
		"Uid": "65534 65534 65534 65534", "Gid": "65534 65534 65534 65534", "Groups": "",
		"CapInh": zero, "CapPrm": zero, "CapEff": zero, "CapBnd": zero, "CapAmb": zero,
		"NoNewPrivs": "1", "Seccomp": "2", "pid": "1", "cgroup": "0::/",
	} {
		if got[k] != want {
			t.Errorf("%s: got %q, want %q", k, got[k], want)
		}
	}
	myNet, _ := os.Readlink("/proc/self/ns/net")
	if got["netns"] == "" || got["netns"] == myNet {
		t.Errorf("netns: agent %q, klock %q: want a new network namespace", got["netns"], myNet)
	}
	rel := strings.TrimPrefix(s.Group.Path, mustMount(t))
	if unifiedLine(string(hostCg)) != "0::"+rel {
		t.Errorf("host view of the agent's cgroup: %q, want 0::%s", hostCg, rel)
	}
	if len(procs) != 1 || int(procs[0]) != p.Pid {
		t.Errorf("session cgroup procs %v, want [%d]", procs, p.Pid)
	}
}

func mustMount(t *testing.T) string {
	mp, err := cgroup.Mountpoint()
	if err != nil {
		t.Fatal(err)
	}
	return mp
}

// TestSeccompDenies: each call would succeed or fail differently without
// the filter; EPERM (ENOSYS for clone3) proves the filter answered.
func TestSeccompDenies(t *testing.T) {
	want := map[string]string{
		"bpf": "EPERM", "ptrace": "EPERM", "perf_event_open": "EPERM", "io_uring_setup": "EPERM",
		"keyctl": "EPERM", "setns": "EPERM", "unshare_user": "EPERM", "name_to_handle_at": "EPERM",
		"process_vm_readv": "EPERM", "clone3": "ENOSYS", "file_setattr": "ENOSYS",
	}
	r := run(t, probeSpec(t, "syscalls"))
	got := lines(r.stdout)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	// Declared io_uring is let through: the same call now creates a ring.
	s := probeSpec(t, "syscalls")
	s.AllowIOURing = true
	if got := lines(run(t, s).stdout)["io_uring_setup"]; got != "ok" {
		t.Errorf("io_uring_setup with AllowIOURing: got %q, want ok", got)
	}
}

// TestSeccompRefusesMetaIoctls: with DenyMetaIoctls, setting a file's
// flags or fsxattr through a read-only descriptor of a file the agent owns
// fails with EPERM (the owner's call succeeds without the filter, as the
// second run shows) and the flags stay as they were.
func TestSeccompRefusesMetaIoctls(t *testing.T) {
	wd := agentDir(t)
	f := filepath.Join(wd, "owned.txt")
	writeAgentFile(t, f, "x")
	flags := func() uint32 {
		fd, err := unix.Open(f, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		v, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		if err != nil {
			t.Skipf("no inode flags on this file system: %v", err)
		}
		return v
	}
	before := flags()
	for _, deny := range []bool{true, false} {
		s := probeSpec(t, "metaioctl", f)
		s.Ruleset = compile(t, wd, "PROVIDES PROC:"+probePath, "CONSUMES FILE:"+wd+"/**")
		s.DenyMetaIoctls = deny
		r := run(t, s)
		got := lines(r.stdout)
		want := "ok"
		if deny {
			want = "EPERM"
		}
		for _, c := range metaIoctlCalls {
			if k := c.name + ":" + f; got[k] != want {
				t.Errorf("deny=%v %s: got %q, want %q (stderr %s)", deny, k, got[k], want, r.stderr)
			}
		}
		if after := flags(); deny && after != before {
			t.Errorf("flags %#x after a refused FS_IOC_SETFLAGS, want %#x", after, before)
		} else if !deny && after&fsNodumpFl == 0 {
			t.Errorf("flags %#x: the owner's FS_IOC_SETFLAGS without the filter did not land", after)
		}
	}
}

// TestMetaIoctlsRefusedByManifest: the filter refuses metadata ioctls when
// the manifest lets the agent change no file, or nothing observes them;
// bpf-lsm decides them itself.
func TestMetaIoctlsRefusedByManifest(t *testing.T) {
	ro := compile(t, "/w", "CONSUMES FILE:/w/**")
	rw := compile(t, "/w", "CONSUMES FILE:/w/**", "MUTATES FILE:/w/src/**")
	for _, c := range []struct {
		rs            *policy.Ruleset
		lsm, observed bool
		want          bool
	}{
		{ro, false, true, true},
		{rw, false, true, false},
		{rw, false, false, true},
		{ro, true, true, false},
		{rw, true, false, false},
	} {
		if got := MetaIoctlsRefused(c.rs, c.lsm, c.observed); got != c.want {
			t.Errorf("mutates=%v lsm=%v observed=%v: refused=%v, want %v", c.rs.DeclaresMutates(), c.lsm, c.observed, got, c.want)
		}
	}
}

// TestCannotLeaveCgroup: writing to the parent's cgroup.procs fails, for
// the default uid and for an explicit root agent (whose DAC would allow it:
// only Landlock stops it), and the agent is still in the session after.
func TestCannotLeaveCgroup(t *testing.T) {
	testutil.RequirePrivileged(t)
	parentProcs := filepath.Join(mustMount(t), cgroup.Parent, "cgroup.procs")
	rootProcs := filepath.Join(mustMount(t), "cgroup.procs")
	for _, user := range []*Credential{agentUser(), {UID: 0, GID: 0, AllowRoot: true}} {
		t.Run(fmt.Sprintf("uid%d", user.UID), func(t *testing.T) {
			s := probeSpec(t, "write", parentProcs+":0", rootProcs+":0", "/proc/self/cgroup:x")
			s.User = user
			r := run(t, s)
			got := lines(r.stdout)
			for _, p := range []string{parentProcs, rootProcs} {
				if got[p] != "EACCES" {
					t.Errorf("write %s: got %q, want EACCES", p, got[p])
				}
			}
			if r.exit != (Exit{}) {
				t.Errorf("probe: %v\n%s", r.exit, r.stderr)
			}
		})
	}
}

// TestMemfdCannotExec: code copied into a memfd is invisible to Landlock;
// vm.memfd_noexec=2 in the session's pid namespace refuses its exec.
func TestMemfdCannotExec(t *testing.T) {
	r := run(t, probeSpec(t, "memfd-exec"))
	if got := lines(r.stdout)["memfd-exec"]; got != "EACCES" {
		t.Errorf("exec of a memfd: got %q, want EACCES (stderr %s)", got, r.stderr)
	}
}

func TestExitStatusPropagates(t *testing.T) {
	wd := agentDir(t)
	rs := compile(t, wd, "PROVIDES PROC:/usr/bin/dash", "PROVIDES PROC:/usr/bin/sleep")
	if r := sh(t, rs, "exit 7"); r.exit != (Exit{Code: 7}) || r.exit.ExitCode() != 7 {
		t.Errorf("exit 7: got %v", r.exit)
	}
	if r := sh(t, rs, "true"); r.exit != (Exit{}) {
		t.Errorf("true: got %v", r.exit)
	}
}

func TestSignals(t *testing.T) {
	testutil.RequirePrivileged(t)
	wd := agentDir(t)
	rs := compile(t, wd, "PROVIDES PROC:/usr/bin/dash", "PROVIDES PROC:/usr/bin/sleep")
	start := func(script string) (*Process, *bufio.Reader) {
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { outR.Close() })
		p, err := Start(context.Background(), Spec{Ruleset: rs, Group: newGroup(t), User: agentUser(),
			Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin"}, Stdout: outW})
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(outR)
		if l, err := br.ReadString('\n'); l != "ready\n" {
			t.Fatalf("agent did not start: %q %v", l, err)
		}
		return p, br
	}
	t.Run("Kill", func(t *testing.T) {
		p, _ := start("echo ready; sleep 1000 & sleep 1000")
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		if exit, _ := p.Wait(); exit.Signal != syscall.SIGKILL || exit.ExitCode() != 128+9 {
			t.Errorf("got %v, want killed by SIGKILL (137)", exit)
		}
	})
	t.Run("HandledSIGTERM", func(t *testing.T) {
		p, _ := start("trap 'exit 3' TERM; echo ready; sleep 1000 & wait")
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if exit, _ := p.Wait(); exit != (Exit{Code: 3}) {
			t.Errorf("got %v, want exit status 3 from the TERM trap", exit)
		}
		if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("signal after exit: %v", err)
		}
	})
	t.Run("ContextCancelKillsSession", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		outR, outW, _ := os.Pipe()
		defer outR.Close()
		p, err := Start(ctx, Spec{Ruleset: rs, Group: newGroup(t), User: agentUser(),
			Args: []string{"/bin/sh", "-c", "echo ready; sleep 1000"}, Env: []string{"PATH=/usr/bin"}, Stdout: outW})
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		if l, _ := bufio.NewReader(outR).ReadString('\n'); l != "ready\n" {
			t.Fatalf("agent did not start: %q", l)
		}
		cancel()
		if exit, _ := p.Wait(); exit.Signal != syscall.SIGKILL {
			t.Errorf("got %v, want SIGKILL after cancel", exit)
		}
	})
}

// TestStage2Errors: a failure before exec comes back as a precise
// StageError and leaves no process in the session.
func TestStage2Errors(t *testing.T) {
	testutil.RequirePrivileged(t)
	wd := agentDir(t)
	rs := compile(t, wd, "PROVIDES PROC:/usr/bin/dash")
	// root's, closed to others: the agent's user cannot reach inside.
	locked := filepath.Join(wd, "locked")
	if err := os.MkdirAll(filepath.Join(locked, "in"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		spec  Spec
		step  string
		errno syscall.Errno
		msg   string
	}{
		{"missing dir", Spec{Args: []string{"/bin/sh"}, Dir: wd + "/nope"}, "chdir", syscall.ENOENT, wd + "/nope: no such file or directory"},
		{"dir the agent cannot reach", Spec{Args: []string{"/bin/sh"}, Dir: locked + "/in"}, "chdir", syscall.EACCES,
			locked + "/in: permission denied: the agent runs as uid " + strconv.Itoa(int(agentUser().UID)) + ", which cannot reach it: give that user search permission"},
		{"undeclared binary", Spec{Args: []string{"/usr/bin/id"}}, "exec", syscall.EACCES, "/usr/bin/id: permission denied"},
		{"not in PATH", Spec{Args: []string{"no-such-tool"}, Env: []string{"PATH=/usr/bin"}}, "exec", syscall.ENOENT, `"no-such-tool" not found`},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGroup(t)
			s := c.spec
			s.Ruleset, s.Group, s.User = rs, g, agentUser()
			p, err := Start(context.Background(), s)
			var se *StageError
			if p != nil || !errors.As(err, &se) {
				t.Fatalf("got %v, %v; want a *StageError", p, err)
			}
			if se.Step != c.step || !errors.Is(err, c.errno) || !errors.Is(err, ErrSetup) || !strings.Contains(se.Msg, c.msg) {
				t.Errorf("got %#v (%v); want step %s, errno %v, message containing %q", se, err, c.step, c.errno, c.msg)
			}
			if procs, err := g.Procs(); err != nil || len(procs) != 0 {
				t.Errorf("session not empty after a failed start: %v %v", procs, err)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	wd := t.TempDir()
	rs := compile(t, wd, "PROVIDES PROC:/usr/bin/dash")
	g := &cgroup.Group{}
	for _, c := range []struct {
		name string
		spec Spec
		want error
	}{
		{"implicit root", Spec{Ruleset: rs, Group: g, Args: []string{"/bin/sh"}, User: &Credential{}}, ErrRootNotExplicit},
		{"no user", Spec{Ruleset: rs, Group: g, Args: []string{"/bin/sh"}}, ErrNoUser},
		{"no ruleset", Spec{Group: g, Args: []string{"/bin/sh"}, User: agentUser()}, ErrBadSpec},
		{"no cgroup", Spec{Ruleset: rs, Args: []string{"/bin/sh"}, User: agentUser()}, ErrBadSpec},
		{"no command", Spec{Ruleset: rs, Group: g, User: agentUser()}, ErrBadSpec},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Start(context.Background(), c.spec); !errors.Is(err, c.want) {
				t.Errorf("got %v, want %v", err, c.want)
			}
		})
	}
}

// TestExtraFilesOnly: ExtraFiles reach the agent as fd 3, ...; stage 2's
// own pipes (the next fds) do not.
func TestExtraFilesOnly(t *testing.T) {
	wd := agentDir(t)
	rs := compile(t, wd, "PROVIDES PROC:/usr/bin/dash")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	r := run(t, Spec{Ruleset: rs, Args: []string{"/bin/sh", "-c", `echo via-fd3 >&3; for fd in 4 5 6; do [ -e /proc/self/fd/$fd ] && echo leaked=$fd; done; exit 0`},
		ExtraFiles: []*os.File{pw}})
	pw.Close()
	b, _ := io.ReadAll(pr)
	if string(b) != "via-fd3\n" || r.stdout != "" || r.exit != (Exit{}) {
		t.Errorf("fd 3 got %q; stdout %q (want no leaked fds); exit %v; stderr %s", b, r.stdout, r.exit, r.stderr)
	}
}
