//go:build linux

package looprelay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/klocklabs/klock/internal/netnsdo"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

// agentEnv makes the test binary an agent (TestMain): its own network
// namespace, a connect trap of its own (the shape of stage 2's), the
// listener sent on fd 3, then the steps the variable names, one result
// line each on stdout.
const agentEnv = "LOOPRELAY_TEST_AGENT"

func TestMain(m *testing.M) {
	if steps, ok := os.LookupEnv(agentEnv); ok {
		runtime.LockOSThread()
		if err := agentMain(strings.Split(steps, " ")); err != nil {
			fmt.Println("fatal", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// trapConnect is stage 2's connect trap alone: the arch (a foreign one is
// killed), x32 (ENOSYS), then connect -> the listener.
func trapConnect() []unix.SockFilter {
	arch, nr := uint32(0xc000003e), uint32(unix.SYS_CONNECT) // AUDIT_ARCH_X86_64
	if runtime.GOARCH == "arm64" {
		arch = 0xc00000b7 // AUDIT_ARCH_AARCH64
	}
	ld := func(k uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: k}
	}
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }
	return []unix.SockFilter{
		ld(4), jeq(arch, 1, 0), ret(0x80000000),
		ld(0), {Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: 0x40000000, Jt: 0, Jf: 1}, ret(0x00050000 | uint32(unix.ENOSYS)),
		jeq(nr, 0, 1), ret(unix.SECCOMP_RET_USER_NOTIF), ret(0x7fff0000),
	}
}

// directEnv makes the agent run its steps on the host's network, with no
// trap: the benchmark's baseline.
const directEnv = "LOOPRELAY_TEST_DIRECT"

func agentMain(steps []string) error {
	if os.Getenv(directEnv) == "1" {
		return runSteps(steps)
	}
	if err := netnsdo.LoopbackUp(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	prog := trapConnect()
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// TSYNC with the listener needs TSYNC_ESRCH; every thread of the
	// agent must trap, as stage 2's single thread passes it on at exec.
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH)
	l, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fp)))
	if e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	if err := unix.Sendmsg(3, []byte{1}, unix.UnixRights(int(l)), nil, 0); err != nil {
		return err
	}
	unix.Close(int(l))
	var b [1]byte
	if _, err := unix.Read(3, b[:]); err != nil {
		return err
	}
	return runSteps(steps)
}

func runSteps(steps []string) error {
	for _, s := range steps {
		op, arg, _ := strings.Cut(s, "=")
		fmt.Println(op, agentStep(op, arg))
	}
	return nil
}

// agentStep runs one step with raw system calls (the libc-free shape of
// any client) and says what came of it.
func agentStep(op, arg string) string {
	switch op {
	case "block", "nonblock", "refused":
		fd, local, err := dial(arg, op == "nonblock")
		if err != nil {
			return "error " + err.Error()
		}
		defer unix.Close(fd)
		got, err := hello(fd)
		if err != nil {
			return "error " + err.Error()
		}
		if op == "block" {
			if n, err := unix.Write(fd, make([]byte, sentBytes)); n != sentBytes {
				return fmt.Sprintf("error wrote %d: %v", n, err)
			}
		}
		// A second connect on the same socket, then a disconnect: the
		// kernel's answer for a connected socket, and a refusal.
		e1 := unix.Connect(fd, inet4(arg))
		_, _, e2 := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&[16]byte{})), 16)
		return fmt.Sprintf("%s local=%d again=%v unspec=%v", got, local, errName(e1), errName(e2))
	case "toctou":
		return toctou(arg)
	case "send":
		return send(arg)
	}
	return "unknown step"
}

func errName(err error) string {
	var e unix.Errno
	if errors.As(err, &e) && e != 0 {
		return unix.ErrnoName(e)
	}
	return "ok"
}

func inet4(ap string) *unix.SockaddrInet4 {
	a := netip.MustParseAddrPort(ap)
	return &unix.SockaddrInet4{Addr: a.Addr().As4(), Port: int(a.Port())}
}

// dial connects a TCP socket to ap, non-blocking as a poll loop would,
// and returns it and its local port.
func dial(ap string, nonblock bool) (int, int, error) {
	typ := unix.SOCK_STREAM | unix.SOCK_CLOEXEC
	if nonblock {
		typ |= unix.SOCK_NONBLOCK
	}
	fd, err := unix.Socket(unix.AF_INET, typ, 0)
	if err != nil {
		return -1, 0, err
	}
	err = unix.Connect(fd, inet4(ap))
	if nonblock {
		if !errors.Is(err, unix.EINPROGRESS) {
			unix.Close(fd)
			return -1, 0, fmt.Errorf("non-blocking connect: %v, want EINPROGRESS", err)
		}
		pf := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(pf, 10000); err != nil {
			unix.Close(fd)
			return -1, 0, err
		}
		if e, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); e != 0 {
			err = unix.Errno(e)
		} else {
			err = nil
		}
		if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_NONBLOCK == 0 {
			err = errors.New("the socket lost O_NONBLOCK")
		}
	}
	if fdfl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fdfl&unix.FD_CLOEXEC == 0 {
		err = errors.New("the socket lost FD_CLOEXEC")
	}
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	sa, _ := unix.Getsockname(fd)
	return fd, sa.(*unix.SockaddrInet4).Port, nil
}

// hello reads the service's greeting (its name) through fd, whatever
// its blocking mode.
func hello(fd int) (string, error) {
	var b [16]byte
	for {
		n, err := unix.Read(fd, b[:])
		if errors.Is(err, unix.EAGAIN) {
			pf := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			unix.Poll(pf, 10000)
			continue
		}
		if err != nil {
			return "", err
		}
		return string(b[:n]), nil
	}
}

// send connects to ap (arg "ap,bytes"), sends the bytes, waits for the
// service's end, and says how long it took (ns).
func send(arg string) string {
	ap, ns, _ := strings.Cut(arg, ",")
	n, _ := strconv.Atoi(ns)
	t := time.Now()
	fd, _, err := dial(ap, false)
	if err != nil {
		return "error " + err.Error()
	}
	defer unix.Close(fd)
	buf := make([]byte, 256<<10)
	for n > 0 {
		w, err := unix.Write(fd, buf[:min(n, len(buf))])
		if err != nil {
			return "error " + err.Error()
		}
		n -= w
	}
	unix.Shutdown(fd, unix.SHUT_WR)
	for {
		if k, err := unix.Read(fd, buf); k <= 0 || err != nil {
			break
		}
	}
	return strconv.FormatInt(time.Since(t).Nanoseconds(), 10)
}

// toctou connects to the declared service's address while another thread
// rewrites the port in the sockaddr to the undeclared one and back, as
// fast as it can: no connect may reach the undeclared service.
func toctou(arg string) string {
	good, bad, _ := strings.Cut(arg, ",")
	g, b := netip.MustParseAddrPort(good), netip.MustParseAddrPort(bad)
	var sa [16]byte
	*(*uint16)(unsafe.Pointer(&sa[0])) = unix.AF_INET
	copy(sa[4:8], g.Addr().AsSlice())
	port := func(p uint16) { sa[2], sa[3] = byte(p>>8), byte(p) }
	port(g.Port())
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			if i%2 == 0 {
				port(b.Port())
			} else {
				port(g.Port())
			}
		}
	}()
	counts := map[string]int{}
	for range 300 {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "error " + err.Error()
		}
		_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa[0])), 16)
		if e != 0 {
			counts[unix.ErrnoName(e)]++
		} else if got, err := hello(fd); err != nil {
			counts["read-"+errName(err)]++
		} else {
			counts[got]++
		}
		unix.Close(fd)
	}
	stop.Store(true)
	<-done
	return fmt.Sprint(counts)
}

// sentBytes is what the blocking connect's client sends.
const sentBytes = 1000

// service listens on the host's loopback and greets every client with
// its name; it records the clients' addresses.
type service struct {
	name  string
	port  uint16
	mu    sync.Mutex
	peers []netip.AddrPort
	read  atomic.Int64
}

func startService(t testing.TB, name string) *service {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &service{name: name, port: uint16(ln.Addr().(*net.TCPAddr).Port)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.peers = append(s.peers, c.RemoteAddr().(*net.TCPAddr).AddrPort())
			s.mu.Unlock()
			c.Write([]byte(name))
			go func() {
				n, _ := io.Copy(io.Discard, c)
				s.read.Add(n)
				c.Close()
			}()
		}
	}()
	return s
}

func (s *service) addr() string { return "127.0.0.1:" + strconv.Itoa(int(s.port)) }

func (s *service) clients() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]netip.AddrPort(nil), s.peers...)
}

// runAgent starts the agent with steps in a namespace of its own, lets
// setup prepare the relay (given the agent's pid and its listener), and
// returns the agent's result lines by step.
func runAgent(t testing.TB, steps []string, setup func(pid int, listener *os.File) *Relay) (map[string]string, *Relay) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "mine"), os.NewFile(uintptr(fds[1]), "theirs")
	defer mine.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), agentEnv+"="+strings.Join(steps, " "))
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	defer cmd.Wait()
	defer cmd.Process.Kill()
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(int(mine.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || oobn == 0 {
		t.Fatalf("the agent sent no listener: %v", err)
	}
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	lfds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	r := setup(cmd.Process.Pid, os.NewFile(uintptr(lfds[0]), "listener"))
	if _, err := mine.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	res := results(out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the agent: %v (%v)", err, res)
	}
	return res, r
}

func results(out io.Reader) map[string]string {
	res := map[string]string{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		op, rest, _ := strings.Cut(sc.Text(), " ")
		res[op] = rest
	}
	return res
}

// runDirect runs the agent's steps on the host's network, untrapped.
func runDirect(t testing.TB, steps []string) map[string]string {
	t.Helper()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), agentEnv+"="+strings.Join(steps, " "), directEnv+"=1")
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("the direct agent: %v", err)
	}
	return results(strings.NewReader(string(b)))
}

func relayOf(t testing.TB, pid int, svc *service, opts ...Option) *Relay {
	r, err := New(pid, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := r.Add("svc", netip.MustParseAddr("127.0.0.1"), policy.PortRange{Lo: svc.port, Hi: svc.port}, policy.ProtoTCP); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestHandOffConnects: an agent in its own namespace whose connect traps
// to the relay reaches a declared host loopback service over a socket of
// the host's (the service sees the agent's own local port, from the
// host's loopback: one hop, no copy), blocking and non-blocking (the
// connect returns EINPROGRESS, the socket keeps O_NONBLOCK and
// FD_CLOEXEC); a second connect on it gets EISCONN and a disconnect
// EPERM; an undeclared host loopback port is refused in the namespace;
// and a thread rewriting the sockaddr during the connects never reaches
// the undeclared service.
func TestHandOffConnects(t *testing.T) {
	testutil.RequirePrivileged(t)
	svc, other := startService(t, "declared"), startService(t, "undeclared")
	steps := []string{"block=" + svc.addr(), "nonblock=" + svc.addr(), "refused=" + other.addr(), "toctou=" + svc.addr() + "," + other.addr()}
	res, r := runAgent(t, steps, func(pid int, l *os.File) *Relay {
		r := relayOf(t, pid, svc)
		if err := r.HandOff(l); err != nil {
			t.Fatal(err)
		}
		return r
	})
	t.Logf("agent: %v", res)
	seen := map[int]bool{}
	for _, c := range svc.clients() {
		if !c.Addr().IsLoopback() {
			t.Errorf("the service saw a client from %s, not the host's loopback", c)
		}
		seen[int(c.Port())] = true
	}
	for _, op := range []string{"block", "nonblock"} {
		got, local, _ := strings.Cut(res[op], " local=")
		if got != "declared" || !strings.HasSuffix(local, "again=EISCONN unspec=EPERM") {
			t.Errorf("%s connect: %q", op, res[op])
		}
		port, _ := strconv.Atoi(strings.Fields(local)[0])
		if !seen[port] {
			t.Errorf("%s: the agent's local port %d is not one the service saw (%v): a second hop", op, port, svc.clients())
		}
	}
	// Each attempt reached the declared service (handed over, or
	// continued to the copying relay) or was refused in the namespace.
	if !toctouOK.MatchString(res["toctou"]) {
		t.Errorf("toctou: %s", res["toctou"])
	}
	for _, c := range other.clients() {
		t.Errorf("the undeclared service was reached, from %s", c)
	}
	r.WaitCounted(5 * time.Second)
	c := r.Counters()["svc"]
	t.Logf("counters: %+v", c)
	if c.Handed < 2 || c.Uncounted != 0 {
		t.Errorf("counters %+v: want the connects handed over, counted", c)
	}
	// Exact out of the session; in, the service's FIN counts one more
	// on a handed connection (tcp_info's bytes_received).
	greet := uint64(len("declared")) * (c.Handed + c.Copied)
	if c.OutBytes != sentBytes || svc.read.Load() != sentBytes || c.InBytes < greet || c.InBytes > greet+c.Handed {
		t.Errorf("counters %+v: want %d bytes out (the service read %d), %d..%d in", c, sentBytes, svc.read.Load(), greet, greet+c.Handed)
	}
}

var toctouOK = regexp.MustCompile(`^map\[(ECONNREFUSED:\d+ )?declared:\d+\]$`)

// TestRefusedUndeclaredPort: with the trap, an undeclared host loopback
// port is refused (no listener in the namespace), as without it.
func TestRefusedUndeclaredPort(t *testing.T) {
	testutil.RequirePrivileged(t)
	svc, other := startService(t, "declared"), startService(t, "undeclared")
	res, _ := runAgent(t, []string{"refused=" + other.addr()}, func(pid int, l *os.File) *Relay {
		r := relayOf(t, pid, svc)
		if err := r.HandOff(l); err != nil {
			t.Fatal(err)
		}
		return r
	})
	if res["refused"] != "error connection refused" || len(other.clients()) != 0 {
		t.Errorf("an undeclared port: %q, the service saw %v", res["refused"], other.clients())
	}
}

// TestBudgetCopies: with an egress budget the relay takes no connect: it
// continues to the copying relay, which counts every byte. So does a
// relay whose kernel refused an addfd (before 5.9).
func TestBudgetCopies(t *testing.T) {
	testutil.RequirePrivileged(t)
	t.Run("budget", func(t *testing.T) { copies(t, func(r *Relay) { r.SetBudget(1<<40, nil) }) })
	t.Run("no addfd", func(t *testing.T) { copies(t, func(r *Relay) { r.noAddfd.Store(true) }) })
}

func copies(t *testing.T, set func(*Relay)) {
	svc := startService(t, "declared")
	res, r := runAgent(t, []string{"block=" + svc.addr()}, func(pid int, l *os.File) *Relay {
		r := relayOf(t, pid, svc)
		set(r)
		if err := r.HandOff(l); err != nil {
			t.Fatal(err)
		}
		return r
	})
	if !strings.HasPrefix(res["block"], "declared") {
		t.Fatalf("block: %q", res["block"])
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Counters()["svc"].InBytes == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c := r.Counters()["svc"]; c.Handed != 0 || c.Copied == 0 || c.InBytes != uint64(len("declared")) {
		t.Errorf("counters %+v: want the connect copied, none handed", c)
	}
}
