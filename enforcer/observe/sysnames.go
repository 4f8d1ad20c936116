//go:build linux && (amd64 || arm64)

package observe

import (
	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/metaioctl"
)

// sysNames names the syscalls the BPF side reports (both architectures).
var sysNames = map[int32]string{
	unix.SYS_OPENAT: "openat", unix.SYS_OPENAT2: "openat2", unix.SYS_OPEN_BY_HANDLE_AT: "open_by_handle_at",
	unix.SYS_MKDIRAT: "mkdirat", unix.SYS_MKNODAT: "mknodat", unix.SYS_UNLINKAT: "unlinkat",
	unix.SYS_RENAMEAT: "renameat", unix.SYS_RENAMEAT2: "renameat2", unix.SYS_LINKAT: "linkat",
	unix.SYS_SYMLINKAT: "symlinkat", unix.SYS_TRUNCATE: "truncate", unix.SYS_FTRUNCATE: "ftruncate",
	unix.SYS_FCHMOD: "fchmod", unix.SYS_FCHMODAT: "fchmodat", unix.SYS_FCHMODAT2: "fchmodat2",
	unix.SYS_FCHOWN: "fchown", unix.SYS_FCHOWNAT: "fchownat", unix.SYS_UTIMENSAT: "utimensat",
	unix.SYS_SETXATTR: "setxattr", unix.SYS_LSETXATTR: "lsetxattr", unix.SYS_FSETXATTR: "fsetxattr",
	unix.SYS_REMOVEXATTR: "removexattr", unix.SYS_LREMOVEXATTR: "lremovexattr", unix.SYS_FREMOVEXATTR: "fremovexattr",
	unix.SYS_SETXATTRAT: "setxattrat", unix.SYS_REMOVEXATTRAT: "removexattrat",
	unix.SYS_EXECVE: "execve", unix.SYS_EXECVEAT: "execveat",
	unix.SYS_SOCKET: "socket", unix.SYS_CONNECT: "connect", unix.SYS_SENDTO: "sendto", unix.SYS_SENDMSG: "sendmsg",
	unix.SYS_SENDMMSG: "sendmmsg", unix.SYS_BIND: "bind", unix.SYS_LISTEN: "listen",
	unix.SYS_IO_URING_SETUP: "io_uring_setup", unix.SYS_IO_URING_ENTER: "io_uring_enter", unix.SYS_IO_URING_REGISTER: "io_uring_register",
}

func syscallName(r *raw) string {
	switch r.op {
	case opExec:
		if r.nr < 0 {
			return "execve" // sched_process_exec: execve or execveat succeeded
		}
	case opFork:
		return "fork"
	case opExit:
		return "exit"
	case opCompat:
		return "ia32 syscall"
	case opIoctl:
		if n := metaioctl.Name(uint32(r.flags)); n != "" {
			return "ioctl " + n
		}
		return "ioctl"
	}
	if n, ok := sysNames[r.nr]; ok {
		return n
	}
	if n, ok := legacyNames[r.nr]; ok {
		return n
	}
	return "syscall"
}
