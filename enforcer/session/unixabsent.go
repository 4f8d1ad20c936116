//go:build linux

package session

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// socketAbsent marks a refused connect or send to a pathname AF_UNIX
// socket that does not exist as the ENOENT it would have been without the
// wall. The cgroup AF_UNIX hooks decide by name before the kernel looks
// the name up, so a program probing for an optional socket (a logging
// daemon's, a name service cache's) got EPERM for a path where nothing
// listens, and a strict session was killed for reaching nothing; bpf-lsm's
// connect check does the same by name. The engine treats
// a failed attempt on an absent object as no violation (decide.absent);
// a socket that exists is judged as before, so nothing reached is ever
// excused. Call it before the engine decides ev.
func socketAbsent(ev *event.Event) {
	t := ev.Triple
	if !ev.Blocked || t.Type != policy.ObjFile || t.Predicate != policy.Consumes || t.Path == "" || t.Path[0] != '/' {
		return
	}
	switch ev.Syscall {
	case "connect", "sendto", "sendmsg", "sendmmsg", // tracepoints, the cgroup hooks
		"unix_stream_connect", "unix_may_send", "socket_connect", "socket_sendmsg": // bpf-lsm's name check
	default:
		return
	}
	var st unix.Stat_t
	if err := unix.Lstat(t.Path, &st); errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		ev.Errno = int32(unix.ENOENT)
	}
}
