//go:build linux

package nshelper

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
)

func TestMain(m *testing.M) {
	Init()
	os.Exit(m.Run())
}

// TestOpenViewAfterEveryProcessExited: a mount namespace whose root was
// pivoted (as a container runtime does) and whose only process has exited,
// held by an open ns/mnt: OpenView still gives its root and its mount
// table, mount points relative to that root. The observer needs both to
// name what a short-lived container did after the container is gone.
func TestOpenViewAfterEveryProcessExited(t *testing.T) {
	testutil.RequirePrivileged(t)
	dir := t.TempDir()
	// Debian's root is merged-/usr: /usr bound in keeps umount and sleep,
	// and umount needs a /proc.
	script := `set -e
mount -t tmpfs rootfs "$1"
mkdir "$1/old" "$1/inner" "$1/usr" "$1/proc"
mount -t tmpfs inner "$1/inner"
mount --bind /usr "$1/usr"
for d in bin sbin lib lib64; do ln -s "usr/$d" "$1/$d"; done
echo hi > "$1/inner/marker"
cd "$1"
pivot_root . old
mount -t proc proc /proc
umount -l /old
exec sleep 60`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	mi := "/proc/" + strconv.Itoa(pid) + "/mountinfo"
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(mi)
		if strings.Contains(string(b), " /inner ") && !strings.Contains(string(b), " /old") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the namespace was not set up in 10 s; its mountinfo:\n%s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	cmd.Process.Kill()
	cmd.Wait()

	self, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	for name, opts := range map[string][]Option{"re-executed": nil, "binary": {Binary(self)}} {
		t.Run(name, func(t *testing.T) {
			v, err := OpenView(ns, opts...)
			if err != nil {
				t.Fatalf("OpenView: %v", err)
			}
			defer v.Close()
			checkView(t, v)
		})
	}
}

// checkView checks the view of TestOpenViewAfterEveryProcessExited's
// namespace: its mount table relative to its root, and a file there.
func checkView(t *testing.T, v *View) {
	for i := 0; i < 2; i++ { // read twice: the table is read again from offset 0
		if _, err := v.Mountinfo.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(v.Mountinfo)
		if err != nil {
			t.Fatal(err)
		}
		var mps []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(line); len(f) > 4 {
				mps = append(mps, f[4])
			}
		}
		if strings.Join(mps, ",") != "/,/inner,/usr,/proc" {
			t.Fatalf("read %d: mount points %q, want /, /inner, /usr and /proc (relative to the pivoted root):\n%s", i, mps, b)
		}
	}
	fd, err := unix.Openat(int(v.Root.Fd()), "inner/marker", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("inner/marker in the namespace's root: %v", err)
	}
	f := os.NewFile(uintptr(fd), "marker")
	defer f.Close()
	if b, _ := io.ReadAll(f); string(b) != "hi\n" {
		t.Fatalf("marker = %q", b)
	}
}

// TestSetMemfdNoexec: the switch is set in the other pid namespace, not
// in ours, by a helper started from the given binary or by re-execution,
// and no later child of this process lands in the other namespace (the
// thread that joined it for its children is put back).
func TestSetMemfdNoexec(t *testing.T) {
	testutil.RequirePrivileged(t)
	if _, err := os.Stat(MemfdNoexecSysctl); err != nil {
		t.Skip("no vm.memfd_noexec on this kernel (6.3+)")
	}
	ours, err := os.ReadFile(MemfdNoexecSysctl)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	for name, opts := range map[string][]Option{"re-executed": nil, "binary": {Binary(self)}} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command("unshare", "-p", "-f", "sleep", "60")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			inner := waitChild(t, cmd.Process.Pid)
			ns, err := os.Open("/proc/" + strconv.Itoa(inner) + "/ns/pid")
			if err != nil {
				t.Fatal(err)
			}
			defer ns.Close()
			if err := SetMemfdNoexec(ns, opts...); err != nil {
				t.Fatalf("SetMemfdNoexec: %v", err)
			}
			out, err := exec.Command("nsenter", "-t", strconv.Itoa(inner), "-p", "--", "cat", MemfdNoexecSysctl).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "2" {
				t.Fatalf("vm.memfd_noexec in the namespace: %q %v, want 2", out, err)
			}
			if now, _ := os.ReadFile(MemfdNoexecSysctl); string(now) != string(ours) {
				t.Fatalf("ours changed: %q, was %q", now, ours)
			}
			want, _ := os.Readlink("/proc/self/ns/pid")
			for i := 0; i < 20; i++ {
				c := exec.Command("true")
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				got, _ := os.Readlink("/proc/" + strconv.Itoa(c.Process.Pid) + "/ns/pid")
				c.Wait()
				if got != want {
					t.Fatalf("a later child is in pid namespace %s, want ours %s", got, want)
				}
			}
		})
	}
}

// waitChild returns the pid of pid's first child (unshare -f's).
func waitChild(t *testing.T, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
		if f := strings.Fields(string(b)); len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	t.Fatalf("process %d started no child in 10 s", pid)
	return 0
}

// TestOpenLiveView: the view of a live child's mount namespace, opened
// through /proc without a helper, still shows that namespace (a mount
// only it has, in its table and under its root) once the child has
// exited and been reaped.
func TestOpenLiveView(t *testing.T) {
	testutil.RequirePrivileged(t)
	dir := t.TempDir()
	script := `set -e
mkdir "$1/inner"
mount -t tmpfs inner "$1/inner"
echo hi > "$1/inner/marker"
echo ready
exec sleep 60`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("the namespace was not set up: %q %v", line, err)
	}
	v, err := OpenLiveView(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := os.Stat(filepath.Join(dir, "inner", "marker")); err == nil {
		t.Fatal("the child's mount is visible on the host: the test shows nothing")
	}
	b, err := io.ReadAll(v.Mountinfo)
	if err != nil || !strings.Contains(string(b), " "+filepath.Join(dir, "inner")+" ") {
		t.Fatalf("the child's mount table (%v) lacks %s/inner:\n%s", err, dir, b)
	}
	fd, err := unix.Openat(int(v.Root.Fd()), strings.TrimPrefix(filepath.Join(dir, "inner", "marker"), "/"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("the marker under the child's root: %v", err)
	}
	f := os.NewFile(uintptr(fd), "marker")
	defer f.Close()
	if b, _ := io.ReadAll(f); string(b) != "hi\n" {
		t.Fatalf("marker = %q", b)
	}
	if _, err := OpenLiveView(cmd.Process.Pid); err == nil {
		t.Error("OpenLiveView of a reaped pid succeeded")
	}
}
