//go:build linux

package session

import (
	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// unixWalled says whether a session may need the cgroup AF_UNIX wall: its
// file wall may be Landlock, which cannot wall pathname sockets. bpf-lsm
// decides them itself; an observe-only session walls nothing.
func unixWalled(choice Backend) bool {
	return choice != BackendObserve && choice != BackendLSM
}

// attachUnix walls g's pathname AF_UNIX connects and datagrams with the
// cgroup AF_UNIX hooks when Landlock is the file wall. Where the kernel has
// no such hooks the tracepoints detect them (after the effect) and the log
// says so; that is this kernel's guarantee, not a degraded session. A
// kernel that has them but cannot attach them to this session degrades.
func (b *backends) attachUnix(g *cgroup.Group, rs *policy.Ruleset, l *loading) error {
	if l.ug == nil {
		return nil
	}
	r := l.unixGuard()
	if b.lsms != nil {
		// bpf-lsm decides them (unix_stream_connect, unix_may_send).
		if r.err == nil && r.own {
			r.g.Close()
		}
		return nil
	}
	if r.err != nil {
		b.list = append(b.list, unixDetectedOnly(r.err))
		return nil
	}
	b.ug, b.ownUG = r.g, r.own
	s, err := r.g.Attach(g, rs)
	if err != nil {
		if b.ownUG {
			b.ug.Close()
		}
		b.ug = nil
		return b.degrade("cgroup-unix", "connects and datagrams to undeclared pathname AF_UNIX sockets reach their listener before the kill",
			"run as root on a kernel with cgroup BPF (klock doctor says what is missing)", err)
	}
	b.ugs = s
	b.list = append(b.list, vlog.Backend{Name: "cgroup-unix", Guarantee: vlog.GuaranteeBlocks, Details: []string{
		"connect_unix and sendmsg_unix programs on the session cgroup: a connect, sendto, sendmsg or sendmmsg datagram to a pathname AF_UNIX socket the rules do not grant CONSUMES on is refused (EPERM) before its listener hears of it",
		"decided by the name the agent gave (relative names joined to its working directory; \".\", \"..\" and empty components refused); a declared name that is a symbolic link to another socket is detected by the tracepoints",
	}})
	return nil
}

// unixDetectedOnly is the log's entry for pathname AF_UNIX sockets on a
// Landlock host without the cgroup AF_UNIX hooks.
func unixDetectedOnly(why error) vlog.Backend {
	return vlog.Backend{Name: "unix-sockets", Guarantee: vlog.GuaranteeDetects, Details: []string{
		"pathname AF_UNIX sockets are detected only: neither bpf-lsm nor the cgroup AF_UNIX hooks (cgroup/connect_unix, sendmsg_unix) work on this kernel, and Landlock cannot wall them; the tracepoints report a connect or datagram to an undeclared socket after its listener heard it (strict: killed, files rolled back)",
		"cgroup AF_UNIX hooks: " + why.Error(),
	}}
}
