//go:build linux

package stage2

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/metaioctl"
)

// deniedSyscalls fail with EPERM for the agent: kernel-wide or
// cross-process power (BPF, tracing, other processes' memory, modules,
// kexec, mounts, keyrings, file handles that bypass path checks, entering
// namespaces).
var deniedSyscalls = []string{
	"bpf", "perf_event_open", "ptrace", "process_vm_readv", "process_vm_writev",
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
	"fsmount", "fspick", "mount_setattr",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"keyctl", "add_key", "request_key", "open_by_handle_at", "name_to_handle_at",
	"setns", "userfaultfd", "swapon", "swapoff", "reboot", "acct",
}

var ioURingSyscalls = []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}

// nsFlags are the namespace-creating clone/unshare flags: the agent may not
// make namespaces (a user namespace would hand it capabilities inside).
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

const (
	retKillProcess = 0x80000000
	retErrno       = 0x00050000
	retUserNotif   = 0x7fc00000
	retAllow       = 0x7fff0000

	bpfLdAbsW = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJge    = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfJset   = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfRet    = unix.BPF_RET | unix.BPF_K

	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits (little endian on both supported arches)
	offArg1 = 24
)

// seccompProgram builds the agent's filter. The syscall numbers come from
// go-seccomp-bpf's tables for the running architecture; the program itself
// is assembled here because go-seccomp-bpf v1.4.0's Policy.Assemble lets
// a foreign-architecture syscall (e.g. int 0x80 on x86_64) fall through to
// the default action and never reaches a second syscall group.
//
// Shape: a foreign audit arch kills the process; x32 syscalls fail with
// ENOSYS; each denied syscall fails with EPERM; clone and unshare with a
// namespace flag fail with EPERM; clone3 fails with ENOSYS (its flags are
// in memory the filter cannot read, and libc falls back to clone on
// ENOSYS); file_setattr fails with ENOSYS (see filterOptions);
// ioctl(TIOCSTI) fails with EPERM, and so do the metadata ioctls
// (metaioctl.List) when o.denyMetaIoctls; everything else is allowed.
func seccompProgram(o filterOptions) ([]unix.SockFilter, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	return seccompProgramFor(info, o)
}

// filterOptions are the Spec's choices the filter depends on.
type filterOptions struct {
	allowIOURing bool
	// denyMetaIoctls: refuse MetaIoctls with EPERM, before their effect
	// (Spec.DenyMetaIoctls says when).
	denyMetaIoctls bool
	// trapConnect: connect(2) waits for the session's answer through the
	// filter's listener (Spec.NotifyFD).
	trapConnect bool
}

func seccompProgramFor(info *arch.Info, o filterOptions) ([]unix.SockFilter, error) {
	if info.ID != arch.X86_64.ID && info.ID != arch.AARCH64.ID {
		return nil, fmt.Errorf("seccomp: architecture %s is not supported (x86_64 and aarch64 are)", info.Name)
	}
	nr := func(name string) (uint32, error) {
		n, ok := info.SyscallNames[name]
		if !ok {
			return 0, fmt.Errorf("seccomp: no syscall %q on %s", name, info.Name)
		}
		return uint32(n), nil
	}
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	prog := []unix.SockFilter{
		stmt(bpfLdAbsW, offArch),
		jump(bpfJeq, uint32(info.ID), 1, 0),
		stmt(bpfRet, retKillProcess),
		stmt(bpfLdAbsW, offNr),
	}
	if info.ID == arch.X86_64.ID {
		prog = append(prog, jump(bpfJge, 0x40000000, 0, 1), stmt(bpfRet, retErrno|uint32(unix.ENOSYS)))
	}
	if o.trapConnect {
		// After the arch and x32 checks: a foreign ABI's connect (i386's
		// socketcall or connect, x32's) never reaches this line, it was
		// killed or failed above, so none goes around the trap.
		n, err := nr("connect")
		if err != nil {
			return nil, err
		}
		prog = append(prog, jump(bpfJeq, n, 0, 1), stmt(bpfRet, retUserNotif))
	}
	denied := append([]string(nil), deniedSyscalls...)
	if !o.allowIOURing {
		denied = append(denied, ioURingSyscalls...)
	}
	for _, name := range denied {
		n, err := nr(name)
		if err != nil {
			return nil, err
		}
		prog = append(prog, jump(bpfJeq, n, 0, 1), stmt(bpfRet, retErrno|uint32(unix.EPERM)))
	}
	clone3, err := nr("clone3")
	if err != nil {
		return nil, err
	}
	prog = append(prog, jump(bpfJeq, clone3, 0, 1), stmt(bpfRet, retErrno|uint32(unix.ENOSYS)))
	// file_setattr (6.17) sets an inode's fsxattr by path: no LSM hook
	// klock attaches to sees it, nor a ctime check of the tracepoint
	// backend. ENOSYS makes a program fall back to FS_IOC_FSSETXATTR,
	// which every backend decides (as for clone3).
	prog = append(prog, jump(bpfJeq, nrFileSetattr, 0, 1), stmt(bpfRet, retErrno|uint32(unix.ENOSYS)))
	// arg-checked syscalls: if nr matches, load the argument, test, deny,
	// and reload nr for the next check.
	argCheck := func(name string, off uint32, test unix.SockFilter) error {
		n, err := nr(name)
		if err != nil {
			return err
		}
		prog = append(prog,
			jump(bpfJeq, n, 0, 4),
			stmt(bpfLdAbsW, off),
			test,
			stmt(bpfRet, retErrno|uint32(unix.EPERM)),
			stmt(bpfLdAbsW, offNr))
		return nil
	}
	for _, name := range []string{"clone", "unshare"} {
		if err := argCheck(name, offArg0, jump(bpfJset, nsFlags, 0, 1)); err != nil {
			return nil, err
		}
	}
	// ioctl: the kernel takes the command as an unsigned int, so the low
	// 32 bits of the argument are all of it.
	cmds := []uint32{unix.TIOCSTI}
	if o.denyMetaIoctls {
		for _, m := range metaioctl.List {
			cmds = append(cmds, m.Cmd)
		}
	}
	ioctl, err := nr("ioctl")
	if err != nil {
		return nil, err
	}
	prog = append(prog, argIn(ioctl, offArg1, cmds)...)
	prog = append(prog, stmt(bpfRet, retAllow))
	return prog, nil
}

// argIn returns the instructions that fail syscall n with EPERM when its
// argument at off is one of vals, and leave the syscall number in A for
// the next check otherwise:
//
//	jeq n, 0, skip      (not n: past the block)
//	ld  arg
//	jeq v0, ret, 0      ... one per value; the last falls past ret
//	ret EPERM
//	ld  nr
func argIn(n, off uint32, vals []uint32) []unix.SockFilter {
	m := len(vals)
	out := []unix.SockFilter{
		{Code: bpfJeq, K: n, Jf: uint8(m + 3)},
		{Code: bpfLdAbsW, K: off},
	}
	for k, v := range vals {
		f := unix.SockFilter{Code: bpfJeq, K: v, Jt: uint8(m - 1 - k)}
		if k == m-1 {
			f.Jf = 1
		}
		out = append(out, f)
	}
	return append(out,
		unix.SockFilter{Code: bpfRet, K: retErrno | uint32(unix.EPERM)},
		unix.SockFilter{Code: bpfLdAbsW, K: offNr})
}

// loadSeccomp installs prog on the calling thread (no TSYNC: stage 2 execs
// from this thread). no_new_privs must already be set.
func loadSeccomp(prog []unix.SockFilter) error {
	_, err := loadSeccompFlags(prog, 0)
	return err
}

// loadSeccompListener installs prog with a listener for its
// SECCOMP_RET_USER_NOTIF (seccomp_unotify(2)) and returns the listener's
// fd (close-on-exec: the kernel makes it so).
//
// With SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19) where the
// kernel has it: once the listener has read a trapped call, only a fatal
// signal takes the agent's thread out of it. Without it, any signal (Go's
// preemption signal, often) does, after klock connected a host socket for
// the call: the call runs again and the service sees a connection opened
// and closed for nothing, one a service that accepts once takes as its
// client.
func loadSeccompListener(prog []unix.SockFilter) (int, error) {
	fd, err := loadSeccompFlags(prog, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV)
	if errors.Is(err, unix.EINVAL) {
		return loadSeccompFlags(prog, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
	}
	return fd, err
}

func loadSeccompFlags(prog []unix.SockFilter, flags uintptr) (int, error) {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// DeniedSyscalls returns the names of the syscalls the agent's filter fails
// with EPERM unconditionally (deniedSyscalls and the io_uring calls), a fresh
// slice each time. enforcer/oci merges them into a container's seccomp
// profile, so a container under klock-runtime denies what klock run denies.
// The argument-checked denials (namespace flags of clone and unshare,
// ioctl(TIOCSTI), the metadata ioctls) and clone3's and file_setattr's
// ENOSYS are not in it: they are not a whole syscall.
func DeniedSyscalls() []string {
	return append(append([]string(nil), deniedSyscalls...), ioURingSyscalls...)
}
