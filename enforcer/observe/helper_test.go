//go:build linux && (amd64 || arm64)

package observe

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/internal/testutil"
	"golang.org/x/sys/unix"
)

// The test binary doubles as the observed process: with helperEnv set,
// TestMain runs a scenario instead of the tests.
const helperEnv = "KLOCK_OBSERVE_HELPER"

func TestMain(m *testing.M) {
	if s := os.Getenv(helperEnv); s != "" {
		if err := runHelper(s, os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func must(err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// runHelper performs a scenario's operations, prints "ready", then waits for
// stdin to close so the test can resolve paths while the process lives.
func runHelper(name string, args []string) error {
	switch name {
	case "ops":
		if err := helperOps(args[0], args[1], args[2]); err != nil {
			return err
		}
	case "uring":
		params := make([]byte, 120) // struct io_uring_params
		fd, _, _ := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
		if int(fd) >= 0 {
			unix.Close(int(fd))
		}
	case "ioctl":
		if err := helperIoctl(args[0]); err != nil {
			return err
		}
	case "loop":
		return helperLoop(args[0], args[1])
	case "zapped":
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		if err := testutil.MkdirsInZappedPage(args[0], n, false); err != nil {
			return err
		}
	case "fifo":
		if err := helperSignalledFIFO(args[0]); err != nil {
			return err
		}
	case "fdexec":
		if err := helperFDExec(args[0]); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown scenario %q", name)
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return nil
}

// helperSignalledFIFO opens the FIFO fifo for reading, which waits for a
// writer, while signals keep interrupting the open (each one runs it
// again); a writer opens it 50ms later.
func helperSignalledFIFO(fifo string) error {
	go func() {
		time.Sleep(50 * time.Millisecond)
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	}()
	var fd int
	err := testutil.WhileSignalled(func() (err error) {
		fd, err = unix.Open(fifo, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return must(err, "open fifo")
	}
	return unix.Close(fd)
}

// helperFDExec runs programs named by a descriptor, not a path: /bin/true
// copied into a memfd and run through /proc/self/fd/N, then prog (a file on
// disk) run through /dev/fd/N. Both children have exited before it prints.
func helperFDExec(prog string) error {
	src, err := os.ReadFile("/bin/true")
	if err != nil {
		return err
	}
	mfd, err := unix.MemfdCreate("klock-observe", 0)
	if err != nil {
		return must(err, "memfd_create")
	}
	if _, err := unix.Write(mfd, src); err != nil {
		return must(err, "write memfd")
	}
	pfd, err := unix.Open(prog, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	for _, name := range []string{fmt.Sprintf("/proc/self/fd/%d", mfd), fmt.Sprintf("/dev/fd/%d", pfd)} {
		cmd := exec.Command(name)
		if err := cmd.Run(); err != nil {
			return must(err, "exec "+name)
		}
		fmt.Printf("child %d\n", cmd.Process.Pid)
	}
	return nil
}

// helperOps: read, write, create via dirfd, unlink, rename (twice), read
// through a symlink, exec /bin/true, TCP connect, UDP sendto.
func helperOps(dir, tcpAddr, udpAddr string) error {
	if _, err := os.ReadFile(filepath.Join(dir, "in.txt")); err != nil {
		return err
	}
	fd, err := unix.Open(filepath.Join(dir, "out.txt"), unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return must(err, "open out")
	}
	unix.Write(fd, []byte("x"))
	unix.Close(fd)
	dfd, err := unix.Open(filepath.Join(dir, "sub"), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return must(err, "open sub")
	}
	nfd, err := unix.Openat(dfd, "new.txt", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return must(err, "openat new")
	}
	unix.Close(nfd)
	if err := unix.Unlinkat(dfd, "gone.txt", 0); err != nil {
		return must(err, "unlinkat")
	}
	unix.Close(dfd)
	if err := unix.Rename(filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")); err != nil {
		return must(err, "rename")
	}
	if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, "c.txt"), unix.AT_FDCWD, filepath.Join(dir, "d.txt"), unix.RENAME_NOREPLACE); err != nil {
		return must(err, "renameat2")
	}
	if _, err := os.ReadFile(filepath.Join(dir, "link")); err != nil {
		return must(err, "read link")
	}
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		return must(err, "exec")
	}
	fmt.Printf("child %d\n", cmd.Process.Pid)
	tcp := netip.MustParseAddrPort(tcpAddr)
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.Connect(s, &unix.SockaddrInet4{Port: int(tcp.Port()), Addr: tcp.Addr().As4()}); err != nil {
		return must(err, "connect")
	}
	unix.Close(s)
	udp := netip.MustParseAddrPort(udpAddr)
	u, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.Sendto(u, []byte("hi"), 0, &unix.SockaddrInet4{Port: int(udp.Port()), Addr: udp.Addr().As4()}); err != nil {
		return must(err, "sendto")
	}
	unix.Close(u)
	return nil
}

// helperIoctl reads path's inode flags and writes them back with nodump
// through a read-only descriptor (a metadata ioctl), and makes ioctls that
// change nothing (FS_IOC_GETFLAGS, TCGETS on the file: ENOTTY).
func helperIoctl(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	f, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return must(err, "FS_IOC_GETFLAGS")
	}
	_, _ = unix.IoctlGetTermios(fd, unix.TCGETS)
	return must(unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(f|0x40 /* FS_NODUMP_FL */)), "FS_IOC_SETFLAGS")
}

// helperLoop opens and closes path n times, as fast as it can.
func helperLoop(path, count string) error {
	var n int
	fmt.Sscan(count, &n)
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	fdcwd := unix.AT_FDCWD
	atfdcwd := uintptr(fdcwd)
	start := time.Now()
	defer func() { fmt.Printf("elapsed %d\n", time.Since(start).Nanoseconds()) }()
	for i := 0; i < n; i++ {
		fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, atfdcwd, uintptr(unsafe.Pointer(p)), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
		if e != 0 {
			return e
		}
		unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
	}
	return nil
}

// session is a real cgroup watched by a real Observer.
type session struct {
	o   *Observer
	g   *cgroup.Group
	w   *Watch
	fd  *os.File
	got []Record
}

var sessionSeq int

func newSession(t testing.TB, o *Observer) *session { return newSessionOpts(t, o) }

func newSessionOpts(t testing.TB, o *Observer, opts ...WatchOption) *session {
	t.Helper()
	sessionSeq++
	g, err := cgroup.Create(fmt.Sprintf("observe-test-%d-%d", os.Getpid(), sessionSeq))
	if err != nil {
		testutil.Unavailable(t, "no cgroup2: "+err.Error())
	}
	t.Cleanup(func() { _ = g.Delete() })
	w, err := o.Watch(g.ID, opts...)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := g.OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fd.Close() })
	return &session{o: o, g: g, w: w, fd: fd}
}

func loadObserver(t testing.TB) *Observer { return loadObserverOpts(t, Options{}) }

func loadObserverOpts(t testing.TB, opts Options) *Observer {
	t.Helper()
	testutil.RequirePrivileged(t)
	o, err := LoadOptions(opts)
	if err != nil {
		testutil.Unavailable(t, "cannot load the observation programs: "+err.Error())
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// inCgroup makes cmd start inside the session's cgroup.
func (s *session) inCgroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(s.fd.Fd())
}

// collect reads records until done(all so far) is true or the deadline (a
// hang guard, not a timing assertion) passes.
func (s *session) collect(t testing.TB, done func([]Record) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !done(s.got) {
		select {
		case r, ok := <-s.w.Records():
			if !ok {
				return
			}
			s.got = append(s.got, r)
		case <-deadline:
			t.Errorf("gave up waiting for records; have %d", len(s.got))
			return
		}
	}
}

// drain syncs with the kernel, unwatches and keeps everything left.
func (s *session) drain(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.o.Sync(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if err := s.o.Unwatch(s.g.ID); err != nil {
		t.Fatalf("unwatch: %v", err)
	}
	for r := range s.w.Records() {
		s.got = append(s.got, r)
	}
}

// drain2 is drain for a consumer that reads the channel itself.
func (s *session) drain2(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.o.Sync(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if err := s.o.Unwatch(s.g.ID); err != nil {
		t.Fatalf("unwatch: %v", err)
	}
}

func describe(rs []Record) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %s pid=%d %s %s extra=[%s] errno=%d path=%s arg=%q\n", r.Kind, r.Event.PID, r.Event.Syscall, r.Event.Triple, r.Event.Extra, r.Event.Errno, r.Path, r.Arg)
	}
	return b.String()
}
