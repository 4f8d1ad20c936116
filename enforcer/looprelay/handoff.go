//go:build linux

package looprelay

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The handoff (package doc): the agent's connect(2) traps to klock
// (stage 2's seccomp filter, launch.Spec.TrapConnect); a connect to a
// declared host loopback service over TCP gets a socket klock made and
// connected in the host's namespace, put in place of the agent's own with
// SECCOMP_IOCTL_NOTIF_ADDFD, and the connect returns. The agent's bytes
// then go to the service over one TCP connection, as the host's own do.

// connectTimeout bounds klock's connect to the service, as the copying
// relay's dial.
const connectTimeout = 10 * time.Second

// HandOff answers the agent's trapped connect calls that arrive on
// listener (launch.Process.ConnectListener), until the agent has exited
// or Close. It takes listener over (closed by Close); on an error the
// caller keeps it. Every connect waits for its answer, so once called,
// answers never stop while the agent runs.
func (r *Relay) HandOff(listener *os.File) error {
	cookie, bufs, err := r.nsDefaults()
	if err != nil {
		// Every connect then continues, to the copying relay: the
		// listener is served all the same (unserved, every connect of
		// the agent would fail).
		r.noAddfd.Store(true)
	}
	// A nonblocking dup, for the runtime's poller: the listener polls
	// readable while a notification waits.
	fd, err := unix.FcntlInt(listener.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("looprelay: listener: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fmt.Errorf("looprelay: listener: %w", err)
	}
	l := os.NewFile(uintptr(fd), "seccomp-listener")
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	listener.Close() // the dup serves it
	r.closers = append(r.closers, l)
	r.nsCookie, r.nsBufs = cookie, bufs
	if r.ns != nil && !r.counting {
		r.counting = destroyed.acquire() == nil
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go r.serveNotif(l)
	return nil
}

// Passthrough serves a connect listener for a session with no relay:
// every connect continues as the agent made it. It closes listener when
// the agent has exited (at once when it cannot serve it: the agent's
// connects then fail with ENOSYS).
func Passthrough(listener *os.File) {
	r := &Relay{tcp: map[netip.AddrPort]*counts{}, done: make(chan struct{})}
	r.limit.Store(noLimit)
	if err := r.HandOff(listener); err != nil {
		listener.Close()
		return
	}
	go func() {
		r.wg.Wait()
		r.Close()
	}()
}

// nsDefaults are the agent's namespace's cookie (SO_NETNS_COOKIE) and a
// fresh TCP socket's buffer sizes there: a buffer the agent set differs.
func (r *Relay) nsDefaults() (cookie uint64, bufs [2]int, err error) {
	if r.ns == nil {
		return 0, bufs, ErrClosed
	}
	err = r.inNS(func() error {
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(s)
		if cookie, err = netnsCookie(s); err != nil {
			return err
		}
		bufs[0], _ = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUF)
		bufs[1], _ = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF)
		return nil
	})
	return cookie, bufs, err
}

func netnsCookie(s int) (uint64, error) {
	v, err := unix.GetsockoptUint64(s, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("SO_NETNS_COOKIE: %w", err)
	}
	return v, nil
}

func (r *Relay) serveNotif(l *os.File) {
	defer r.wg.Done()
	rc, err := l.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n seccompNotif
		var rerr error
		done := false
		err := rc.Read(func(fd uintptr) bool {
			pf := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if k, _ := unix.Poll(pf, 0); k <= 0 {
				return false // nothing waits: back to the poller
			}
			if pf[0].Revents&unix.POLLIN == 0 {
				done = true // POLLHUP: no task of the agent is left
				return true
			}
			rerr = notifRecv(int(fd), &n)
			return true
		})
		if err != nil || done {
			return
		}
		if rerr != nil {
			if errors.Is(rerr, unix.ENOENT) {
				continue // the caller went (a signal, its death) before the read
			}
			return
		}
		r.wg.Add(1)
		r.answering.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.answering.Add(-1)
			r.answer(listenerFD{rc}, &n)
		}()
	}
}

// answer decides one trapped connect and answers it. Its error answers
// are errors the kernel's connect could give; a connect the relay does
// not take continues as the agent made it.
func (r *Relay) answer(lfd listenerFD, n *seccompNotif) {
	h, err := r.examine(lfd, n)
	if h == nil {
		if errors.Is(err, errGone) {
			return
		}
		// SECCOMP_USER_NOTIF_FLAG_CONTINUE is safe here although the
		// kernel reads the sockaddr (and the fd) again, after this
		// decision: what continues is a connect on the agent's own
		// socket, made in its namespace, and everything that walls the
		// agent decides it on what the kernel uses (cgroup-net's connect
		// hooks on the socket's cgroup, Landlock on the agent's task,
		// netwall on the namespace's packets). Nothing here let it
		// through; it only did not take it. The one exception, a socket
		// this relay handed over, never continues (examine).
		var errno unix.Errno
		if errors.As(err, &errno) {
			_ = notifReturn(lfd, n.id, errno)
			return
		}
		_ = notifContinue(lfd, n.id)
		return
	}
	defer h.close()
	errno := h.connect()
	if errno != 0 {
		r.tellTo(int(n.pid), h.to, errno)
		_ = notifReturn(lfd, n.id, errno)
		return
	}
	cookie, cerr := unix.GetsockoptUint64(h.host, unix.SOL_SOCKET, unix.SO_COOKIE)
	counted := cerr == nil && h.r.count(cookie, h.c)
	// Once the socket is in place, a signal can take the thread out of
	// the call and run it again before this goroutine has answered: the
	// restarted call's examine waits for this answer to be settled.
	key := restartKey{int(n.pid), h.fd}
	settled := make(chan struct{})
	r.handing.Store(key, settled)
	defer func() {
		r.handing.CompareAndDelete(key, settled)
		close(settled)
	}()
	if err := notifAddfd(lfd, n.id, h.host, h.fd, h.cloexec); err != nil {
		if counted {
			h.r.uncount(cookie)
		}
		if errors.Is(err, unix.ENOENT) {
			return // the agent's call is gone: nothing waits for the answer
		}
		// No addfd (before 5.9): the agent connects its own socket, to
		// the copying relay in its namespace, from now on.
		r.noAddfd.Store(true)
		_ = notifContinue(lfd, n.id)
		return
	}
	h.c.handed.Add(1)
	if !counted {
		h.c.uncounted.Add(1)
	}
	// Not SECCOMP_ADDFD_FLAG_SEND: it makes the syscall return the new
	// fd's number, and connect(2) returns 0. The agent's thread waits in
	// the call until this answer, whatever the order.
	var ret unix.Errno
	if h.nonblock {
		// What a non-blocking connect returns; the socket is writable
		// at once and SO_ERROR is 0, as after any completed handshake.
		ret = unix.EINPROGRESS
	}
	// Told once the socket is the agent's, before its call returns: a
	// restarted call (below) gets the same answer and is not told again.
	r.tellTo(int(n.pid), h.to, ret)
	if err := notifReturn(lfd, n.id, ret); errors.Is(err, unix.ENOENT) && cerr == nil {
		// A signal took the agent's thread out of the call after the
		// socket was put in place (the Go runtime's preemption signal
		// does, often): the call restarts, on the socket handed over,
		// and gets this answer (examine), not the kernel's EISCONN.
		h.r.restarts.Store(key, restart{cookie, ret})
	}
}

// restartKey is a thread's fd whose connect was answered with a socket
// while the thread was out of the call; restart is that answer.
type restartKey struct{ tid, fd int }

type restart struct {
	cookie uint64
	ret    unix.Errno
}

// errGone: the notification is no longer valid (the agent's thread left
// the call): nothing to answer.
var errGone = errors.New("looprelay: the trapped call is gone")

// handoff is a connect the relay takes: the agent's fd, its copy of the
// socket (pidfd_getfd), the host socket made for it, the destination.
type handoff struct {
	r        *Relay
	c        *counts
	fd       int
	agent    int // klock's copy of the agent's socket
	host     int
	family   int
	to       netip.AddrPort
	nonblock bool
	cloexec  bool
}

func (h *handoff) close() {
	if h.agent >= 0 {
		unix.Close(h.agent)
	}
	if h.host >= 0 {
		unix.Close(h.host)
	}
}

// examine reads the trapped connect: its sockaddr, once, from the
// agent's memory, and the agent's socket (pidfd_getfd). It returns a
// handoff for a TCP connect to a declared service; else nil and why: an
// errno to answer, or anything else to continue.
func (r *Relay) examine(lfd listenerFD, n *seccompNotif) (*handoff, error) {
	if n.data.nr != unix.SYS_CONNECT {
		return nil, nil
	}
	tid := int(n.pid)
	pidfd, err := openTask(tid)
	if err != nil {
		return nil, errGone
	}
	defer unix.Close(pidfd)
	fd := int(int32(n.data.args[0]))
	sa, saErr := readSockaddr(tid, n.data.args[1], n.data.args[2])
	agent, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		agent = -1
	}
	if errors.Is(err, unix.EPERM) || errors.Is(saErr, unix.EPERM) {
		// klock may not read the agent (no CAP_SYS_PTRACE): it never
		// will, every connect continues to the copying relay.
		r.noAddfd.Store(true)
	}
	h := &handoff{r: r, fd: fd, agent: agent, host: -1}
	// Valid still: the pid was the caller's when the memory and the fd
	// were read, not a recycled one.
	if !notifValid(lfd, n.id) {
		h.close()
		return nil, errGone
	}
	if agent < 0 {
		return nil, nil // not an fd: the kernel says so
	}
	if ck, err := netnsCookie(agent); err == nil && r.nsCookie != 0 && ck != r.nsCookie {
		// A socket of the host's that this relay handed over: never
		// continued, whatever the sockaddr (the kernel would connect
		// it in the host's namespace). Connected, it gives the
		// kernel's answer; a disconnect (AF_UNSPEC) is refused.
		defer h.close()
		if settled, ok := r.handing.Load(restartKey{tid, fd}); ok {
			<-settled.(chan struct{})
		}
		if v, ok := r.restarts.LoadAndDelete(restartKey{tid, fd}); ok {
			if ck, err := unix.GetsockoptUint64(agent, unix.SOL_SOCKET, unix.SO_COOKIE); err == nil && ck == v.(restart).cookie {
				return nil, v.(restart).ret
			}
		}
		if saErr == nil && len(sa) >= 2 && sa[0] == unix.AF_UNSPEC && sa[1] == 0 {
			return nil, unix.EPERM
		}
		// Refused here, where the walls would have judged it (and
		// reported it) had it gone on: told, destination and all.
		if saErr == nil {
			r.tell(tid, sa, unix.EISCONN)
		}
		return nil, unix.EISCONN
	}
	if saErr != nil || !r.takes(h, sa) {
		h.close()
		return nil, nil
	}
	h.cloexec = fdCloexec(tid, fd)
	return h, nil
}

// takes reports whether the relay takes the connect: a TCP socket of the
// agent's namespace, unbound and unconnected, to a declared service of
// the same family, with no egress budget (the copying relay holds it).
func (r *Relay) takes(h *handoff, sa []byte) bool {
	family, to, ok := parseSockaddr(sa)
	if !ok || r.limit.Load() != noLimit || r.noAddfd.Load() {
		return false
	}
	r.mu.Lock()
	counted := r.counting
	r.mu.Unlock()
	if !counted {
		// Its bytes could not be counted (no sock_diag for TCP here):
		// the copying relay takes it and counts every read.
		return false
	}
	dom, err1 := unix.GetsockoptInt(h.agent, unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, err2 := unix.GetsockoptInt(h.agent, unix.SOL_SOCKET, unix.SO_TYPE)
	proto, err3 := unix.GetsockoptInt(h.agent, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err1 != nil || err2 != nil || err3 != nil || dom != family || typ != unix.SOCK_STREAM || proto != unix.IPPROTO_TCP {
		return false
	}
	if acc, _ := unix.GetsockoptInt(h.agent, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); acc != 0 {
		return false
	}
	if _, err := unix.Getpeername(h.agent); !errors.Is(err, unix.ENOTCONN) {
		return false // connected, or connecting: the kernel answers
	}
	if la, err := unix.Getsockname(h.agent); err != nil || boundPort(la) != 0 {
		return false // bound to a port of its namespace: copied instead
	}
	r.mu.Lock()
	c := r.tcp[netip.AddrPortFrom(to.Addr().Unmap(), to.Port())]
	r.mu.Unlock()
	if c == nil {
		return false
	}
	fl, err := unix.FcntlInt(uintptr(h.agent), unix.F_GETFL, 0)
	if err != nil {
		return false
	}
	h.c, h.family, h.to, h.nonblock = c, family, to, fl&unix.O_NONBLOCK != 0
	return true
}

func boundPort(sa unix.Sockaddr) int {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return a.Port
	case *unix.SockaddrInet6:
		return a.Port
	}
	return 0
}

// connect makes the host's socket and connects it to h.to, the copy:
// blocking here until the handshake is done or failed (a loopback
// handshake takes microseconds), so that only a connected socket is ever
// handed over. It returns the connect's errno, 0 when connected.
func (h *handoff) connect() unix.Errno {
	s, err := unix.Socket(h.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_TCP)
	if err != nil {
		return errnoOf(err)
	}
	h.host = s
	copyOptions(h.agent, s, h.family, h.r.nsBufs)
	var sa unix.Sockaddr
	if h.family == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: int(h.to.Port()), Addr: h.to.Addr().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(h.to.Port()), Addr: h.to.Addr().As16()}
	}
	if err := unix.Connect(s, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return errnoOf(err)
	}
	pf := []unix.PollFd{{Fd: int32(s), Events: unix.POLLOUT}}
	for {
		k, err := unix.Poll(pf, int(connectTimeout/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return errnoOf(err)
		}
		if k == 0 {
			return unix.ETIMEDOUT
		}
		break
	}
	if e, err := unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != 0 {
		if err != nil {
			return errnoOf(err)
		}
		return unix.Errno(e)
	}
	if err := lockToPeer(s, h.to); err != nil {
		return unix.ECONNABORTED
	}
	if !h.nonblock {
		if err := unix.SetNonblock(s, false); err != nil {
			return errnoOf(err)
		}
	}
	return 0
}

// count has the handed-over socket's bytes added to c once the kernel
// destroys it (tcpinfo.go); false when they cannot be.
func (r *Relay) count(cookie uint64, c *counts) bool {
	r.live.Add(1)
	ok := destroyed.watch(cookie, func(e ended) {
		c.outP.Add(e.outP)
		c.outB.Add(e.outB)
		c.inP.Add(e.inP)
		c.inB.Add(e.inB)
		r.live.Add(-1)
	})
	if !ok {
		r.live.Add(-1)
	}
	return ok
}

func (r *Relay) uncount(cookie uint64) {
	destroyed.forget(cookie)
	r.live.Add(-1)
}

func errnoOf(err error) unix.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}
