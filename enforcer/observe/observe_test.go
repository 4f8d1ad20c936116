//go:build linux && (amd64 || arm64)

package observe

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/klocklabs/klock/internal/testutil"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

// fixture makes a world-readable directory with the files helperOps uses.
func fixture(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.Chmod(d, 0o755)
	}
	for _, f := range []string{"in.txt", "out.txt", "sub/gone.txt", "a.txt", "c.txt", "target.txt"} {
		p := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("data\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("target.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startHelper runs the test binary as a scenario; it prints "ready" and
// waits for its stdin to close.
type helper struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	out   *bufio.Reader
	lines []string
}

func startHelper(t *testing.T, s *session, scenario string, args ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+scenario)
	cmd.Stderr = os.Stderr
	if s != nil {
		s.inCgroup(cmd)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: in, out: bufio.NewReader(out)}
	for {
		line, err := h.out.ReadString('\n')
		if err != nil {
			cmd.Wait()
			t.Fatalf("helper %s ended before ready: %v", scenario, err)
		}
		line = strings.TrimSpace(line)
		if line == "ready" {
			return h
		}
		h.lines = append(h.lines, line)
	}
}

func (h *helper) finish(t *testing.T) {
	t.Helper()
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
}

func (h *helper) childPid() uint32 {
	for _, l := range h.lines {
		var pid uint32
		if _, err := fmt.Sscanf(l, "child %d", &pid); err == nil {
			return pid
		}
	}
	return 0
}

type want struct {
	triple, extra string
	pid           uint32
}

func listeners(t *testing.T) (tcp, udp netip.AddrPort) {
	t.Helper()
	l := testutil.TCPListener(t, "tcp4", "127.0.0.1:0")
	u, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return netip.MustParseAddrPort(l.Addr().String()), netip.MustParseAddrPort(u.LocalAddr().String())
}

// relevant keeps the records the scenario is about: files under dir, exec
// of /bin/true, and the two loopback ports.
func relevant(rs []Record, dir string, ports ...uint16) []Record {
	var out []Record
	for _, r := range rs {
		if r.Kind != KindEvent {
			continue
		}
		tr := r.Event.Triple
		switch tr.Type {
		case policy.ObjFile:
			if tr.Path == dir || strings.HasPrefix(tr.Path, dir+"/") {
				out = append(out, r)
			}
		case policy.ObjProc:
			if filepath.Base(tr.Path) == "true" {
				out = append(out, r)
			}
		case policy.ObjNet:
			if slices.Contains(ports, tr.Addr.Port()) {
				out = append(out, r)
			}
		}
	}
	return out
}

func has(rs []Record, w want) bool {
	for _, r := range rs {
		if r.Event.Triple.String() == w.triple && (w.extra == "" || r.Event.Extra.String() == w.extra) && r.Event.PID == w.pid {
			return true
		}
	}
	return false
}

func TestObserveOps(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir := fixture(t)
	tcp, udp := listeners(t)
	trueBin, err := filepath.EvalSymlinks("/bin/true")
	if err != nil {
		t.Fatal(err)
	}

	h := startHelper(t, s, "ops", dir, tcp.String(), udp.String())
	pid, child := uint32(h.cmd.Process.Pid), h.childPid()
	if child == 0 {
		t.Fatalf("helper did not report its child: %q", h.lines)
	}
	f := func(p string) string { return filepath.Join(dir, p) }
	wants := []want{
		{"CONSUMES FILE:" + f("in.txt"), "", pid},
		{"MUTATES FILE:" + f("out.txt"), "", pid},
		{"CONSUMES FILE:" + f("sub"), "", pid},
		{"PROVIDES FILE:" + f("sub/new.txt"), "", pid},
		{"DELETES FILE:" + f("sub/gone.txt"), "", pid},
		{"RENAMES FILE:" + f("a.txt"), "MUTATES FILE:" + f("b.txt"), pid},
		{"RENAMES FILE:" + f("c.txt"), "PROVIDES FILE:" + f("d.txt"), pid},
		{"CONSUMES FILE:" + f("target.txt"), "", pid}, // read through the symlink
		{"PROVIDES PROC:" + trueBin, "CONSUMES FILE:" + trueBin, child},
		{"CONSUMES NET:" + tcp.String() + "/tcp", "", pid},
		{"CONSUMES NET:" + udp.String() + "/udp", "", pid},
	}
	// While the helper still lives (so its fds and cwd can be checked).
	s.collect(t, func(rs []Record) bool {
		rel := relevant(rs, dir, tcp.Port(), udp.Port())
		for _, w := range wants {
			if !has(rel, w) {
				return false
			}
		}
		return true
	})
	h.finish(t)
	s.drain(t)

	rel := relevant(s.got, dir, tcp.Port(), udp.Port())
	for _, w := range wants {
		if !has(rel, w) {
			t.Errorf("missing %s [%s] pid %d", w.triple, w.extra, w.pid)
		}
	}
	if len(rel) != len(wants) {
		t.Errorf("want exactly %d records, got %d:\n%s", len(wants), len(rel), describe(rel))
	}
	for _, r := range rel {
		if r.Event.Errno != 0 || r.Event.Blocked {
			t.Errorf("unexpected failure: %s", describe([]Record{r}))
		}
		if r.Event.Triple.Type == policy.ObjFile && r.Path == PathNone {
			t.Errorf("no path source: %s", describe([]Record{r}))
		}
		if r.Event.Triple.String() == "CONSUMES FILE:"+f("target.txt") && r.Arg != f("link") {
			t.Errorf("symlink read: arg %q, want the link %q", r.Arg, f("link"))
		}
	}
	if n, err := o.LostTotal(); err != nil || n != 0 {
		t.Errorf("lost %d (%v)", n, err)
	}
	if t.Failed() {
		t.Logf("all records:\n%s", describe(s.got))
	}
}

func TestObserveOutsideCgroupProducesNothing(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir := fixture(t)
	tcp, udp := listeners(t)
	h := startHelper(t, nil, "ops", dir, tcp.String(), udp.String())
	pid, child := uint32(h.cmd.Process.Pid), h.childPid()
	h.finish(t)
	s.drain(t)
	for _, r := range s.got {
		if r.Event.PID == pid || r.Event.PID == child {
			t.Errorf("record of a process outside the cgroup: %s", describe([]Record{r}))
		}
	}
	if rel := relevant(s.got, dir, tcp.Port(), udp.Port()); len(rel) != 0 {
		t.Errorf("want no records, got:\n%s", describe(rel))
	}
}

func TestObserveBlockedOpen(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir := fixture(t)
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	cat, err := exec.LookPath("cat")
	if err != nil {
		testutil.Unavailable(t, "no cat")
	}
	cmd := exec.Command(cat, secret)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	s.inCgroup(cmd)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("cat of a 0600 root file as nobody succeeded: %s", out)
	}
	s.drain(t)
	rel := relevant(s.got, dir)
	var found bool
	for _, r := range rel {
		if r.Event.Triple.String() == "CONSUMES FILE:"+secret && r.Event.PID == uint32(cmd.Process.Pid) {
			found = true
			if !r.Event.Blocked || r.Event.Errno != int32(unix.EACCES) {
				t.Errorf("want Blocked with EACCES, got blocked=%v errno=%d", r.Event.Blocked, r.Event.Errno)
			}
		}
	}
	if !found {
		t.Errorf("no record of the refused open; got:\n%s", describe(s.got))
	}
}

func TestObserveChildrenForkAndSetsid(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir := fixture(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		testutil.Unavailable(t, "no sh")
	}
	setsid, err := exec.LookPath("setsid")
	if err != nil {
		testutil.Unavailable(t, "no setsid")
	}
	// Child: cat in.txt. Double fork + setsid: the grandchild, in its own
	// session, writes made.txt; the test waits for that file's record.
	script := fmt.Sprintf(`cat %[1]s/in.txt >/dev/null; ( %[2]s %[3]s -c 'cat %[1]s/target.txt >/dev/null; echo x > %[1]s/made.txt' & ) ; exit 0`, dir, setsid, sh)
	cmd := exec.Command(sh, "-c", script)
	s.inCgroup(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	top := uint32(cmd.Process.Pid)
	s.collect(t, func(rs []Record) bool {
		return slices.ContainsFunc(rs, func(r Record) bool {
			return r.Event.Triple.String() == "PROVIDES FILE:"+filepath.Join(dir, "made.txt")
		})
	})
	s.drain(t)
	forks := map[uint32]uint32{}
	for _, r := range s.got {
		if r.Kind == KindFork {
			forks[r.Event.PID] = r.PPID
		}
	}
	descends := func(pid uint32) bool {
		for i := 0; i < 16 && pid != 0; i++ {
			if pid == top {
				return true
			}
			pid = forks[pid]
		}
		return false
	}
	for _, name := range []string{"PROVIDES FILE:" + filepath.Join(dir, "made.txt"), "CONSUMES FILE:" + filepath.Join(dir, "in.txt"), "CONSUMES FILE:" + filepath.Join(dir, "target.txt")} {
		i := slices.IndexFunc(s.got, func(r Record) bool { return r.Event.Triple.String() == name })
		if i < 0 {
			t.Errorf("missing %s", name)
			continue
		}
		if r := s.got[i]; r.Event.PID == top || !descends(r.Event.PID) {
			t.Errorf("%s: pid %d is not a descendant of %d (forks %v)", name, r.Event.PID, top, forks)
		}
	}
	if t.Failed() {
		t.Logf("records:\n%s", describe(relevant(s.got, dir)))
	}
}

// TestDecodeLayout checks the decoder against the bpf2go-generated type.
func TestDecodeLayout(t *testing.T) {
	var in observeObsRec
	in.Ts, in.Cgid, in.Ret, in.Flags = 1, 2, -13, unix.O_CREAT
	in.Ino, in.Dev, in.Pid, in.Tid = 77, 0x800001, 10, 11
	in.Op, in.Kflags, in.Port, in.Family = uint16(opOpen), fIno|fCreated|fCounted, 443, unix.AF_INET
	in.Seen = seenKey{Cgid: 2, Dent: 3, Mnt: 4, Ino: 77, Gen: 5, Flags: 6, Rgen: 7}
	in.Dirfd = -100
	copy(in.Addr[:], []byte{127, 0, 0, 1})
	for i, c := range "cat" {
		in.Comm[i] = int8(c)
	}
	in.Len0, in.Len1 = 7, 3
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, &in); err != nil {
		t.Fatal(err)
	}
	// The kernel sends the record up to path0, then only the path bytes
	// used: path1's right after path0's.
	buf.Truncate(offP0)
	buf.WriteString("/tmp/x\x00/y\x00")
	var r raw
	if err := decode(buf.Bytes()[:offP0+10], &r); err != nil {
		t.Fatal(err)
	}
	if r.ts != 1 || r.cgid != 2 || r.ret != -13 || r.ino != 77 || r.dev != 0x800001 || r.pid != 10 || r.tid != 11 ||
		r.op != opOpen || r.kflags != fIno|fCreated|fCounted || r.port != 443 || r.dirfd != -100 || r.comm != "cat" ||
		string(r.path0) != "/tmp/x" || string(r.path1) != "/y" {
		t.Errorf("decode mismatch: %+v", r)
	}
	if r.seen != in.Seen {
		t.Errorf("seen key %+v, want %+v", r.seen, in.Seen)
	}
	if err := decode(buf.Bytes()[:offP0+9], &r); err == nil {
		t.Error("short path1 accepted")
	}
	if err := decode(buf.Bytes()[:offP0+3], &r); err == nil {
		t.Error("short path accepted")
	}
	if got := kident(0x800001, 5); got.dev != unix.Mkdev(8, 1) {
		t.Errorf("kident dev %x", got.dev)
	}
}

func TestPathHelpers(t *testing.T) {
	for _, c := range []struct{ in, dir, file string }{
		{"/a/b", "/a", "b"}, {"/a", "/", "a"}, {"a", ".", "a"}, {"/a/b/", "/a", "b"},
	} {
		if d, f := splitLast(c.in); d != c.dir || f != c.file {
			t.Errorf("splitLast(%q) = %q %q", c.in, d, f)
		}
	}
	for in, want := range map[string]string{"/a/./b/../c": "/a/c", "/../x": "/x", "/": "/", "rel": "rel"} {
		if got := cleanAbs(in); got != want {
			t.Errorf("cleanAbs(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestObserveMetaIoctl: an ioctl that changes a file's metadata through a
// read-only descriptor is MUTATES of the file, named by the kernel; ioctls
// that change nothing are not reported.
func TestObserveMetaIoctl(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir := fixture(t)
	f := filepath.Join(dir, "in.txt")
	h := startHelper(t, s, "ioctl", f)
	pid := uint32(h.cmd.Process.Pid)
	h.finish(t)
	s.drain(t)
	var ioctls []Record
	for _, r := range s.got {
		if strings.HasPrefix(r.Event.Syscall, "ioctl") {
			ioctls = append(ioctls, r)
		}
	}
	if len(ioctls) != 1 {
		t.Fatalf("want exactly one ioctl record (FS_IOC_SETFLAGS), got:\n%s", describe(ioctls))
	}
	r := ioctls[0]
	if r.Event.Triple.String() != "MUTATES FILE:"+f || r.Event.Syscall != "ioctl FS_IOC_SETFLAGS" || r.Event.PID != pid || r.Path != PathKernel || r.Event.Errno != 0 {
		t.Errorf("got %s (syscall %q, path source %v)", describe(ioctls), r.Event.Syscall, r.Path)
	}
}

// TestObserveInterruptedCall: an open that signals keep interrupting
// (each exit carries the kernel's restart code, and the call runs again)
// is reported once, with its answer: the restart codes are not answers.
func TestObserveInterruptedCall(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir := fixture(t)
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, s, "fifo", fifo)
	h.finish(t)
	s.drain(t)
	var reads []Record
	for _, r := range s.got {
		if r.Event.Triple.String() == "CONSUMES FILE:"+fifo {
			reads = append(reads, r)
		}
	}
	if len(reads) != 1 || reads[0].Event.Errno != 0 {
		t.Errorf("want the FIFO's read open reported once, answered 0; got:\n%s", describe(reads))
	}
}

// TestObserveIOUringReported: io_uring operations bypass the syscall
// tracepoints, so setting one up is reported as KindUnobserved.
func TestObserveIOUringReported(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	h := startHelper(t, s, "uring")
	pid := uint32(h.cmd.Process.Pid)
	h.finish(t)
	s.drain(t)
	i := slices.IndexFunc(s.got, func(r Record) bool {
		return r.Kind == KindUnobserved && r.Event.Syscall == "io_uring_setup" && r.Event.PID == pid
	})
	if i < 0 {
		t.Fatalf("no io_uring_setup record; got:\n%s", describe(s.got))
	}
	if e := s.got[i].Event.Errno; e != 0 && e != int32(unix.EPERM) && e != int32(unix.ENOSYS) {
		t.Errorf("unexpected errno %d", e)
	}
}

// TestObserveExecByDescriptor: a program run through a descriptor (a memfd
// through /proc/self/fd/N, a file on disk through /dev/fd/N) is named by the
// kernel's name of the file it loaded, taken at the exec, though the child
// has exited (and /proc/<pid>/exe with it) before the record is read; the
// name it was run by stays the record's argument.
func TestObserveExecByDescriptor(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir := fixture(t)
	prog := filepath.Join(dir, "prog")
	src, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, src, 0o755); err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, s, "fdexec", prog)
	h.finish(t)
	var pids []uint32
	for _, l := range h.lines {
		var pid uint32
		if _, err := fmt.Sscanf(l, "child %d", &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 2 {
		t.Fatalf("helper reported children %v: %q", pids, h.lines)
	}
	wants := []struct {
		pid       uint32
		triple    string
		argPrefix string
	}{
		{pids[0], "PROVIDES PROC:/memfd:klock-observe", "/proc/self/fd/"},
		{pids[1], "PROVIDES PROC:" + prog, "/dev/fd/"},
	}
	found := func(rs []Record, i int) *Record {
		for j := range rs {
			r := &rs[j]
			if r.Kind == KindEvent && r.Event.PID == wants[i].pid && r.Event.Triple.Type == policy.ObjProc {
				return r
			}
		}
		return nil
	}
	s.collect(t, func(rs []Record) bool { return found(rs, 0) != nil && found(rs, 1) != nil })
	for i, w := range wants {
		r := found(s.got, i)
		if r == nil {
			t.Errorf("no exec record for pid %d (%s)", w.pid, w.triple)
			continue
		}
		if r.Event.Triple.String() != w.triple || r.Path != PathKernel || !strings.HasPrefix(r.Arg, w.argPrefix) {
			t.Errorf("exec by descriptor: %s path=%s arg=%q, want %s path=kernel arg %s…", r.Event.Triple, r.Path, r.Arg, w.triple, w.argPrefix)
		}
	}
	if t.Failed() {
		t.Logf("all records:\n%s", describe(s.got))
	}
}

// TestObserveNameInAZappedPage: a path the kernel read but the BPF program
// could not (its page unmapped from the page tables between the two, as
// reclaim, compaction or the agent's own madvise do) still names what the
// call made or found: user space reads it again from the process. No mkdir
// is reported without its name, the ones that made a directory nor the ones
// that found it there (EEXIST).
func TestObserveNameInAZappedPage(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir := fixture(t)
	const n = 3000
	h := startHelper(t, s, "zapped", dir, strconv.Itoa(n))
	defer h.finish(t)
	mkdirs := func(rs []Record) (named, unnamed int) {
		for _, r := range rs {
			if r.Kind != KindEvent || r.Event.Syscall != "mkdirat" || r.Event.PID != uint32(h.cmd.Process.Pid) {
				continue
			}
			if strings.HasPrefix(r.Event.Triple.Path, dir+"/d") {
				named++
			} else {
				unnamed++
			}
		}
		return
	}
	s.collect(t, func(rs []Record) bool { a, b := mkdirs(rs); return a+b >= 2*n })
	named, unnamed := mkdirs(s.got)
	t.Logf("%d mkdirs named, %d not (%d faulted reads named again)", named, unnamed, o.reread.Load())
	if o.reread.Load() == 0 {
		t.Error("no read faulted: the names were never read again, so this run tested nothing of it")
	}
	if unnamed != 0 || named != 2*n {
		var bad []Record
		for _, r := range s.got {
			if r.Event.Syscall == "mkdirat" && !strings.HasPrefix(r.Event.Triple.Path, dir+"/d") {
				bad = append(bad, r)
			}
		}
		t.Errorf("%d of %d mkdirs named, %d not:\n%s", named, 2*n, unnamed, describe(bad[:min(len(bad), 10)]))
	}
}
