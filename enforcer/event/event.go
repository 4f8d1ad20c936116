package event

import (
	"strings"
	"time"

	"github.com/klocklabs/klock/policy"
)

// Source names the mechanism that saw an operation.
type Source string

const (
	SourceTracepoint Source = "tracepoint"  // raw syscall tracepoints (detects)
	SourceLandlock   Source = "landlock"    // a Landlock denial seen as EACCES (blocked)
	SourceCgroupNet  Source = "cgroup-net"  // cgroup connect/sendmsg/sock_create programs (blocks)
	SourceCgroupUnix Source = "cgroup-unix" // cgroup connect_unix/sendmsg_unix programs (blocks)
	SourceLSM        Source = "bpf-lsm"     // BPF LSM hooks (blocks)
	SourceDNSProxy   Source = "dns-proxy"   // the session's DNS proxy refused a name or withheld an answer's address (blocks)
	// SourceLoopRelay: the loopback relay answered a trapped connect
	// itself (handed it a host socket, or refused it at the trap), where
	// no wall's hook ran (enforcer/looprelay Report).
	SourceLoopRelay Source = "loopback-relay"
)

// Event is one observed operation.
type Event struct {
	Time   time.Time
	Source Source
	Triple policy.Triple
	// Extra is a secondary triple the same operation implies (rename's
	// destination, exec's CONSUMES of the binary); zero when none.
	Extra policy.Triple
	PID   uint32 // thread-group id
	TID   uint32
	Comm  string
	// Syscall is the operation's name (openat, connect, ...), for the log.
	Syscall string
	// Errno is the kernel's answer: 0 when the operation succeeded, else
	// the positive errno (EACCES from Landlock, EPERM from cgroup-net/LSM).
	Errno int32
	// Blocked is true when a kernel mechanism refused the operation before
	// any effect.
	Blocked bool
	// Unnamed is true when the operation's object is a file with no name
	// left (unlinked, or made with O_TMPFILE and never linked), reached
	// through an fd the process holds: nothing outside the process can
	// reach it, and nothing of it outlives its last fd. Triple.Path is
	// then only a label for the log.
	Unnamed bool
	// NameUnread is true when the kernel read the operation's path but
	// klock could not (the page was out of the page tables by the time it
	// looked, and the process had exited or unmapped it before it was
	// read again): Triple.Path (and Extra's) is empty.
	NameUnread bool
	// Tmpfile is true for an open with O_TMPFILE: Triple is PROVIDES of
	// the directory the unnamed file was made in, which the operation
	// did not create (the file has no name until a linkat gives it one).
	Tmpfile bool
	// Repeat is how many more times the same operation happened that the
	// backend counted instead of reporting (the in-kernel count of
	// repeated opens, sent at the end of the session): the event stands
	// for 1 + Repeat operations; 0 for a single operation.
	Repeat uint64
}

// Lost reports events the kernel could not deliver; in strict mode any loss
// ends the session (fail closed).
type Lost struct {
	Time  time.Time
	Count uint64
}

// SessionProc names a path in a session's procfs the way every backend
// reports it: the agent sees only its own pid namespace, so every
// /proc/<n> (and thread-self) is a process of the session, reported as
// /proc/self, which is what intents (and the system-ro baseline) name. A
// sibling's entries are thereby reported as the process's own: same
// session, same uid. bpf/lsm.bpf.c applies the same rule in the kernel.
func SessionProc(p string) string {
	rest, ok := strings.CutPrefix(p, "/proc/")
	if !ok {
		return p
	}
	first, tail, _ := strings.Cut(rest, "/")
	self := first == "self" || first == "thread-self"
	if !self && (first == "" || strings.Trim(first, "0123456789") != "") {
		return p
	}
	// /proc/<n>/root is the process's root directory, which is the
	// session's: a name through it is the name below it (no baseline
	// rule on /proc/self/** may cover another file by this door).
	if tail == "root" {
		return "/"
	}
	if below, ok := strings.CutPrefix(tail, "root/"); ok {
		return "/" + below
	}
	if tail == "" {
		return "/proc/self"
	}
	return "/proc/self/" + tail
}
