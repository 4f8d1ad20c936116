//go:build linux

package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// probe runs inside a session as the agent and prints "name=OUTCOME" lines,
// OUTCOME being "ok" or the errno's name (EACCES, EPERM, ...).
func probe(mode string, args []string) int {
	switch mode {
	case "identity":
		status, _ := os.ReadFile("/proc/self/status")
		for _, l := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(l, ":")
			switch k {
			case "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp":
				fmt.Printf("%s=%s\n", k, strings.Join(strings.Fields(v), " "))
			}
		}
		cg, err := os.ReadFile("/proc/self/cgroup")
		fmt.Printf("cgroup=%s\n", outcome(err, unifiedLine(string(cg))))
		ns, err := os.Readlink("/proc/self/ns/net")
		fmt.Printf("netns=%s\n", outcome(err, ns))
		fmt.Printf("pid=%d\n", os.Getpid())
		// Stay alive until the test has looked at us from outside.
		_, _ = io.ReadAll(os.Stdin)
	case "connect":
		// A TCP connect to the namespace's own loopback, to a port no
		// rule names: Landlock's EACCES when it goes on to the kernel.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Connect(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: 1})
		}
		fmt.Printf("connect=%s\n", outcome(err, "ok"))
	case "fileops":
		for _, a := range args {
			op, rest, _ := strings.Cut(a, ":")
			fmt.Printf("%s=%s\n", a, outcome(fileOp(op, rest), "ok"))
		}
	case "syscalls":
		for _, c := range []struct {
			name string
			call func() error
		}{
			// Each call would fail with a different errno (or succeed)
			// without the filter, so EPERM can only come from seccomp.
			{"bpf", func() error { return rawErr(unix.SYS_BPF, 9999, 0, 0) }},
			{"ptrace", func() error { return rawErr(unix.SYS_PTRACE, 0x7fff, 999999, 0) }},
			{"perf_event_open", func() error { return rawErr(unix.SYS_PERF_EVENT_OPEN, 0, 0, 0) }},
			{"io_uring_setup", ioURingSetup},
			{"keyctl", func() error { return rawErr(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0) }},
			{"setns", func() error { return rawErr(unix.SYS_SETNS, ^uintptr(0), 0, 0) }},
			{"unshare_user", func() error { return rawErr(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0) }},
			{"name_to_handle_at", func() error { return rawErr(unix.SYS_NAME_TO_HANDLE_AT, ^uintptr(99), 0, 0) }},
			{"process_vm_readv", func() error { return rawErr(unix.SYS_PROCESS_VM_READV, 999999, 0, 0) }},
			{"clone3", func() error { return rawErr(unix.SYS_CLONE3, 0, 0, 0) }},
			// EBADF without the filter (fd -1); ENOSYS sends a program to
			// FS_IOC_FSSETXATTR, which is decided.
			{"file_setattr", func() error { return rawErr(469, ^uintptr(0), 0, 0) }},
		} {
			fmt.Printf("%s=%s\n", c.name, outcome(c.call(), "ok"))
		}
	case "write":
		// write:PATH:CONTENT without O_CREAT.
		for _, a := range args {
			p, content, _ := strings.Cut(a, ":")
			fmt.Printf("%s=%s\n", p, outcome(os.WriteFile(p, []byte(content), 0), "ok"))
		}
	case "metaioctl":
		// metaioctl:PATH: each metadata ioctl on a read-only descriptor
		// of PATH (a file the agent owns), setting what it reads back.
		for _, p := range args {
			for _, c := range metaIoctlCalls {
				fmt.Printf("%s:%s=%s\n", c.name, p, outcome(c.call(p), "ok"))
			}
		}
	case "memfd-exec":
		fmt.Printf("memfd-exec=%s\n", outcome(memfdExec(), "ok"))
	default:
		fmt.Fprintf(os.Stderr, "unknown probe %q\n", mode)
		return 2
	}
	return 0
}

func outcome(err error, ok string) string {
	if err == nil {
		return ok
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return "error: " + err.Error()
}

func rawErr(nr, a, b, c uintptr) error {
	r, _, e := unix.Syscall(nr, a, b, c)
	if e != 0 {
		return e
	}
	if nr == unix.SYS_IO_URING_SETUP {
		unix.Close(int(r))
	}
	return nil
}

func ioURingSetup() error {
	var params [120]byte // struct io_uring_params
	return rawErr(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
}

func fileOp(op, arg string) error {
	switch op {
	case "read":
		f, err := os.Open(arg)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.ReadAll(f)
		return err
	case "append": // an existing file, no O_CREAT
		f, err := os.OpenFile(arg, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString("appended\n")
		return err
	case "trunc":
		return unix.Truncate(arg, 0)
	case "create":
		f, err := os.OpenFile(arg, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString("created\n")
		return err
	case "mkdir":
		return unix.Mkdir(arg, 0o755)
	case "unlink":
		return unix.Unlink(arg)
	case "rmdir":
		return unix.Rmdir(arg)
	case "link", "rename":
		src, dst, _ := strings.Cut(arg, ">")
		if op == "link" {
			return unix.Link(src, dst)
		}
		return unix.Rename(src, dst)
	case "exec":
		pid, err := syscall.ForkExec(arg, []string{arg}, &syscall.ProcAttr{Env: []string{}})
		if err != nil {
			return err
		}
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			return err
		}
		if ws.ExitStatus() != 0 {
			return fmt.Errorf("exit %d", ws.ExitStatus())
		}
		return nil
	}
	return fmt.Errorf("unknown op %q", op)
}

func memfdExec() error {
	fd, err := unix.MemfdCreate("probe", 0)
	if err != nil {
		return err
	}
	src, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		return err
	}
	if _, err := unix.Write(fd, src); err != nil {
		return err
	}
	p := fmt.Sprintf("/proc/self/fd/%d", fd)
	pid, err := syscall.ForkExec(p, []string{"true"}, &syscall.ProcAttr{})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, 0, nil)
	return nil
}

// unifiedLine is the cgroup v2 line ("0::/path") of a /proc/PID/cgroup file
// (hybrid hosts list v1 hierarchies too).
func unifiedLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "0::") {
			return l
		}
	}
	return ""
}

// linux/fs.h values x/sys does not carry.
const (
	fsNodumpFl      = 0x40       // FS_NODUMP_FL
	fsIocFsgetxattr = 0x801c581f // FS_IOC_FSGETXATTR
	fsIocFssetxattr = 0x401c5820 // FS_IOC_FSSETXATTR
)

// metaIoctlCalls set a file's metadata through a read-only descriptor,
// each with a value the kernel accepts from the owner (so "ok" without a
// filter): the flags or fsxattr read back, with nodump added.
var metaIoctlCalls = []struct {
	name string
	call func(path string) error
}{
	{"FS_IOC_SETFLAGS", func(p string) error {
		return onReadOnly(p, func(fd int) error {
			f, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
			if err != nil {
				return err
			}
			return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(f|fsNodumpFl))
		})
	}},
	{"FS_IOC_FSSETXATTR", func(p string) error {
		return onReadOnly(p, func(fd int) error {
			var fa [28]byte // struct fsxattr
			if err := ioctlPtr(fd, fsIocFsgetxattr, unsafe.Pointer(&fa[0])); err != nil {
				return err
			}
			fa[0] |= 0x80 // FS_XFLAG_NODUMP (fsx_xflags, little endian)
			return ioctlPtr(fd, fsIocFssetxattr, unsafe.Pointer(&fa[0]))
		})
	}},
}

func onReadOnly(p string, f func(fd int) error) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fd)
}

func ioctlPtr(fd int, req uint, p unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(p)); e != 0 {
		return e
	}
	return nil
}
