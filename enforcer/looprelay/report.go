//go:build linux

package looprelay

import (
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

// Option configures a Relay (New, Open).
type Option func(*Relay)

// Report has f told of every trapped connect the relay answers itself,
// as the event a wall would have reported had the connect reached it: a
// connect handed a socket of the host's, one klock's own connect to the
// service failed (the agent gets its errno), and one refused at the trap
// on a socket the relay handed over (EISCONN, the destination as the
// agent named it). A connect that continues is the walls' to report, as
// without the trap; a disconnect (AF_UNSPEC) names no destination and is
// not told. f is called before the agent's connect returns, from the
// goroutine answering it: the agent's thread waits while f does.
//
// Why: the syscall tracepoints see every connect, answered at the trap
// or not, but bpf-lsm's session has none; its connects are reported by
// cgroup-net, whose hooks run inside connect(2), which a handed-over
// connect never enters. Without this, a declared service reached by
// the handoff would be logged as never used.
func Report(f func(event.Event)) Option { return func(r *Relay) { r.report = f } }

// tell reports a connect of the thread tid to the destination the relay
// read (sa), answered with errno; nothing without Report, or for a
// sockaddr that is neither AF_INET nor AF_INET6.
func (r *Relay) tell(tid int, sa []byte, errno unix.Errno) {
	if r.report == nil || len(sa) < 2 {
		return
	}
	if _, to, ok := parseSockaddr(sa); ok {
		r.tellTo(tid, to, errno)
	}
}

// tellTo reports a TCP connect of the thread tid to `to` answered with
// errno (0, EINPROGRESS for a non-blocking socket, or the failure),
// named as cgroup-net names it: the address unmapped, the thread group
// and the thread as the host's pid namespace numbers them (a
// notification's pid is the caller's thread, in the listener's
// namespace: klock's).
func (r *Relay) tellTo(tid int, to netip.AddrPort, errno unix.Errno) {
	if r.report == nil {
		return
	}
	pid, err := threadGroup(tid)
	if err != nil {
		pid = tid
	}
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/comm")
	r.report(event.Event{
		Time:    time.Now(),
		Source:  event.SourceLoopRelay,
		Triple:  policy.NetTriple(policy.Consumes, netip.AddrPortFrom(to.Addr().Unmap(), to.Port()), policy.ProtoTCP),
		PID:     uint32(pid),
		TID:     uint32(tid),
		Comm:    strings.TrimSuffix(string(comm), "\n"),
		Syscall: "connect",
		Errno:   int32(errno),
	})
}

// Answering reports whether a trapped connect is being answered: once
// the agent has exited, the session waits for none to be before it reads
// the last of Report's events.
func (r *Relay) Answering() bool { return r.answering.Load() > 0 }
