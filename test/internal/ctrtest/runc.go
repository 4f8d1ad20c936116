//go:build linux

package ctrtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
)

// Result is what a container run left: its stdout and stderr (the
// runtime's own messages included: runc writes its errors to stderr) and the
// exit status (the container's, or the runtime's when it failed first).
type Result struct {
	Stdout, Stderr string
	Exit           int
}

// Runc is the runc binary on PATH (Debian: /usr/sbin/runc), or Unavailable.
func Runc(t testing.TB) string {
	t.Helper()
	return lookRuntime(t, "runc")
}

// lookRuntime is the OCI runtime name on PATH, or Unavailable.
func lookRuntime(t testing.TB, name string) string {
	t.Helper()
	testutil.RequirePrivileged(t)
	p, err := exec.LookPath(name)
	if err != nil {
		testutil.Unavailable(t, "no "+name+" on PATH (scripts/deps.sh containers)")
	}
	return p
}

// Crun is the crun binary on PATH (Debian: /usr/bin/crun), or
// Unavailable when missing, and why crun refuses every container on this
// host ("" when it runs them: crunHybrid).
func Crun(t testing.TB) (path, refuses string) {
	t.Helper()
	return lookRuntime(t, "crun"), crunHybrid()
}

// crunHybrid says why crun cannot run a container here, "" when it can:
// on a hybrid cgroup layout (v1 controllers, cgroup2 at
// /sys/fs/cgroup/unified) crun 1.8 refuses every container while the
// cgroup2 hierarchy holds a controller ("cgroups in hybrid mode not
// supported, drop all controllers from cgroupv2"); runc runs there.
func crunHybrid() string {
	b, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers")
	if err != nil || strings.TrimSpace(string(b)) == "" {
		return ""
	}
	return fmt.Sprintf("crun refuses this host's hybrid cgroup layout: /sys/fs/cgroup/unified (cgroup2) holds controllers %q; "+
		"a host on cgroup2 alone, or with those controllers mounted as v1 (mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb), runs crun",
		strings.TrimSpace(string(b)))
}

// StateRoot is a private runc --root for t (runc keeps its state.json
// there), so tests never see the host's containers or each other's.
func StateRoot(t testing.TB) string {
	t.Helper()
	return t.TempDir()
}

// RunC runs the bundle in the foreground with `RUNTIME --root ROOT
// [global...] run --bundle DIR ID` (runtimePath is runc, crun or klock-runtime,
// global its extra global flags) and returns its output and exit status;
// the state root is private to the test. A container left behind is
// deleted when the test ends.
func RunC(t testing.TB, runtimePath string, b *Bundle, id string, global ...string) Result {
	t.Helper()
	root := StateRoot(t)
	t.Cleanup(func() { forceDelete(runtimePath, root, id) })
	args := append([]string{"--root", root}, global...)
	args = append(args, "run", "--bundle", b.Dir, id)
	return run(exec.Command(runtimePath, args...))
}

// run runs cmd and reports its output and exit status (-1 when it could not
// start); output goes to the Result unless cmd already has a Stdout.
func run(cmd *exec.Cmd) Result {
	var out, errb bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout, cmd.Stderr = &out, &errb
	}
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Exit = ee.ExitCode()
	default:
		r.Exit, r.Stderr = -1, r.Stderr+err.Error()
	}
	return r
}

func forceDelete(runtimePath, root, id string) {
	_ = exec.Command(runtimePath, "--root", root, "delete", "--force", id).Run()
}

// Container is a container made by `runc create`, for the create, start,
// wait, delete lifecycle a container engine drives.
type Container struct {
	t       testing.TB
	Runtime string // runc or klock-runtime
	Root    string // the private --root
	ID      string
	Bundle  *Bundle
	// Pid is the container's init, from --pid-file.
	Pid            int
	stdout, stderr *os.File
}

var subreaper sync.Once

// Create runs `RUNTIME --root ROOT create --bundle DIR --pid-file F ID` and
// returns the created container (its init waiting in runc init for start),
// or fails t with the runtime's stderr. The container's stdio are files
// Wait reads. The test process becomes a child subreaper (once, for the
// whole process) so the init, orphaned when runc create exits, is its
// child and Wait gets its exit status, as conmon and containerd's shim do.
// The container is force-deleted when the test ends.
func Create(t testing.TB, runtimePath string, b *Bundle, id string) *Container {
	t.Helper()
	c, r := TryCreate(t, runtimePath, b, id)
	if r.Exit != 0 {
		t.Fatalf("%s create %s: exit %d\n%s%s", filepath.Base(runtimePath), id, r.Exit, r.Stdout, r.Stderr)
	}
	return c
}

// TryCreate is Create for a test that expects it may fail: the container is
// nil unless create exited 0, and the Result is create's (Stdout empty: the
// container's stdout goes to its file).
func TryCreate(t testing.TB, runtimePath string, b *Bundle, id string) (*Container, Result) {
	t.Helper()
	subreaper.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
		}
	})
	dir := t.TempDir()
	c := &Container{t: t, Runtime: runtimePath, Root: StateRoot(t), ID: id, Bundle: b}
	t.Cleanup(func() { forceDelete(runtimePath, c.Root, id) })
	var err error
	c.stdout, err = os.Create(filepath.Join(dir, "stdout"))
	must(t, err)
	c.stderr, err = os.Create(filepath.Join(dir, "stderr"))
	must(t, err)
	t.Cleanup(func() { c.stdout.Close(); c.stderr.Close() })
	pidFile := filepath.Join(dir, "pid")
	cmd := exec.Command(runtimePath, "--root", c.Root, "create", "--bundle", b.Dir, "--pid-file", pidFile, id)
	// The container inherits create's stdio: its stdout and stderr are the
	// files; runc's own messages go to stderr too, so create's errors are
	// read back from the file.
	cmd.Stdout, cmd.Stderr = c.stdout, c.stderr
	r := run(cmd)
	if r.Exit != 0 {
		r.Stderr += c.read(c.stderr)
		return nil, r
	}
	pid, err := os.ReadFile(pidFile)
	must(t, err)
	c.Pid, err = strconv.Atoi(strings.TrimSpace(string(pid)))
	must(t, err)
	return c, r
}

func (c *Container) read(f *os.File) string {
	b, err := os.ReadFile(f.Name())
	must(c.t, err)
	return string(b)
}

// Cmd runs `RUNTIME --root ROOT ARGS...` (start, state, kill, delete ...).
func (c *Container) Cmd(args ...string) Result {
	return run(exec.Command(c.Runtime, append([]string{"--root", c.Root}, args...)...))
}

// Start runs `start ID`, failing t unless it exits 0.
func (c *Container) Start() {
	c.t.Helper()
	if r := c.Cmd("start", c.ID); r.Exit != 0 {
		c.t.Fatalf("start %s: exit %d\n%s%s", c.ID, r.Exit, r.Stdout, r.Stderr)
	}
}

// State is `state ID` parsed.
func (c *Container) State() specs.State {
	c.t.Helper()
	r := c.Cmd("state", c.ID)
	if r.Exit != 0 {
		c.t.Fatalf("state %s: exit %d\n%s", c.ID, r.Exit, r.Stderr)
	}
	var s specs.State
	must(c.t, json.Unmarshal([]byte(r.Stdout), &s))
	return s
}

// Wait waits for the init to exit (it is this process's child: see Create)
// and returns the container's output and exit status (128+signal when
// killed).
func (c *Container) Wait() Result {
	c.t.Helper()
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(c.Pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			c.t.Fatalf("wait4 %d (the container's init): %v", c.Pid, err)
		}
		break
	}
	exit := ws.ExitStatus()
	if ws.Signaled() {
		exit = 128 + int(ws.Signal())
	}
	return Result{Stdout: c.read(c.stdout), Stderr: c.read(c.stderr), Exit: exit}
}

// Delete runs `delete ID` (the poststop hooks run here), failing t unless
// it exits 0, and returns its Result (a poststop hook's failure is only a
// warning on runc's stderr).
func (c *Container) Delete() Result {
	c.t.Helper()
	r := c.Cmd("delete", c.ID)
	if r.Exit != 0 {
		c.t.Fatalf("delete %s: exit %d\n%s%s", c.ID, r.Exit, r.Stdout, r.Stderr)
	}
	return r
}
