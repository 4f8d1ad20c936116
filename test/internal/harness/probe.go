//go:build linux

package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
)

// RunProbe performs each "op:arg" step in order, as the agent, and prints
// one "op:arg=OUTCOME" line per step, OUTCOME being "ok", the errno's name
// (EACCES, EPERM, EXDEV, ...), "exit N" for a child's non-zero exit, or
// "error: ..." for anything else. Steps are independent: a failed step does
// not stop the next.
func RunProbe(args []string) int {
	for _, a := range args {
		op, arg, _ := strings.Cut(a, ":")
		fmt.Printf("%s=%s\n", a, ErrName(step(op, arg)))
	}
	return 0
}

// ErrName names err the way the probe prints it.
func ErrName(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return "error: " + err.Error()
}

// Payload is what write-like steps write.
const Payload = "PWNED"

// ChattrFlags are the inode flags the "chattr" step adds: FS_NODUMP_FL and
// FS_NOATIME_FL, which a file's owner may set without a capability.
const ChattrFlags = 0x40 | 0x80

func writeFD(fd int) error {
	_, err := unix.Write(fd, []byte(Payload))
	unix.Close(fd)
	return err
}

func openWrite(p string, flags int) error {
	fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return writeFD(fd)
}

func two(arg string) (string, string) { a, b, _ := strings.Cut(arg, ">"); return a, b }

func step(op, arg string) error {
	switch op {
	case "read":
		fd, err := unix.Open(arg, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_, err = io.ReadAll(os.NewFile(uintptr(fd), arg))
		return err
	case "retry-read": // read; while refused, retry every 10 ms for up to 3 s (a permissive lease may open the wall)
		deadline := time.Now().Add(3 * time.Second)
		for {
			err := step("read", arg)
			if err == nil || time.Now().After(deadline) || !(errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	case "write": // an existing file, truncated, never created
		return openWrite(arg, unix.O_WRONLY|unix.O_TRUNC)
	case "writedev": // no O_TRUNC (device nodes)
		return openWrite(arg, unix.O_WRONLY)
	case "append":
		return openWrite(arg, unix.O_WRONLY|unix.O_APPEND)
	case "create":
		return openWrite(arg, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
	case "mkdir":
		return unix.Mkdir(arg, 0o755)
	case "mkfifo":
		return unix.Mkfifo(arg, 0o644)
	case "unlink":
		return unix.Unlink(arg)
	case "rename":
		a, b := two(arg)
		return unix.Rename(a, b)
	case "exchange":
		a, b := two(arg)
		return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	case "link":
		a, b := two(arg)
		return unix.Link(a, b)
	case "symlink":
		target, p := two(arg)
		return unix.Symlink(target, p)
	case "trunc":
		return unix.Truncate(arg, 0)
	case "chmod":
		return unix.Chmod(arg, 0o777)
	case "utimes":
		return unix.UtimesNano(arg, []unix.Timespec{{Sec: 1}, {Sec: 1}})
	case "setxattr":
		return unix.Setxattr(arg, "user.klock", []byte("x"), 0)
	case "setflags": // FS_IOC_SETFLAGS through a read-only fd: the flags read back, plus nodump and noatime
		return setFlags(arg, 0, FsIocSetflags)
	case "setflags-dir": // the same on a directory (opened O_RDONLY|O_DIRECTORY)
		return setFlags(arg, unix.O_DIRECTORY, FsIocSetflags)
	case "setflags32": // the 32-bit number (FS_IOC32_SETFLAGS) from a 64-bit process
		return setFlags(arg, 0, FsIoc32Setflags)
	case "fsxattr": // FS_IOC_FSSETXATTR through a read-only fd: the fsxattr read back, plus the nodump xflag
		return onReadOnly(arg, 0, func(fd int) error {
			var fa [28]byte // struct fsxattr; fsx_xflags first (little endian)
			if err := ioctlPtr(fd, fsIocFsgetxattr, unsafe.Pointer(&fa[0])); err != nil {
				return err
			}
			fa[0] |= 0x80 // FS_XFLAG_NODUMP
			return ioctlPtr(fd, fsIocFssetxattr, unsafe.Pointer(&fa[0]))
		})
	case "mmap-exec": // map a readable file PROT_READ|PROT_EXEC (no exec: what ld.so and dlopen do)
		return mapExec(arg, false)
	case "mprotect-exec": // map it PROT_READ, then mprotect it PROT_READ|PROT_EXEC
		return mapExec(arg, true)
	case "chattr": // add nodump and noatime (ChattrFlags) by FS_IOC_SETFLAGS on a read-only descriptor, as an owner may
		fd, err := unix.Open(arg, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		fl, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		if err != nil {
			return err
		}
		return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(fl|ChattrFlags))
	case "exec":
		parts := strings.Split(arg, ",")
		return forkExec(parts[0], parts, []string{"PATH=/usr/bin:/bin"})
	case "ldso": // the dynamic loader running a binary named as its argument
		return forkExec(ldso(), []string{"ld.so", arg}, nil)
	case "memfd-exec": // memfd_create(MFD_EXEC), copy /usr/bin/true in, exec it
		return memfdExec(unix.MFD_EXEC)
	case "memfd-plain-exec": // memfd_create without MFD_EXEC, then exec through /proc/self/fd
		return memfdExec(0)
	case "tmpfile": // O_TMPFILE in DIR, then linkat(/proc/self/fd/N) to DST
		dir, dst := two(arg)
		fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if _, err := unix.Write(fd, []byte(Payload)); err != nil {
			return err
		}
		return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW)
	case "reopen-write": // open read-only, then reopen the fd for writing through /proc/self/fd
		fd, err := unix.Open(arg, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return openWrite("/proc/self/fd/"+strconv.Itoa(fd), unix.O_WRONLY|unix.O_TRUNC)
	case "openat-write": // a dirfd opened O_PATH, then openat(dirfd, NAME) for writing
		dir, name := two(arg)
		dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		return writeFD(fd)
	case "cwd-write": // chdir DIR, write a relative path (the cwd is restored after)
		dir, rel := two(arg)
		old, _ := os.Getwd()
		if err := unix.Chdir(dir); err != nil {
			return err
		}
		defer unix.Chdir(old)
		return openWrite(rel, unix.O_WRONLY|unix.O_TRUNC)
	case "procfd-dir-write": // a directory fd, then /proc/self/fd/N/NAME for writing
		dir, name := two(arg)
		dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		return openWrite("/proc/self/fd/"+strconv.Itoa(dfd)+"/"+name, unix.O_WRONLY|unix.O_TRUNC)
	case "swap-write": // L>A>B: symlink L->A, write through L, close, then atomically point L at B
		l, rest := two(arg)
		a, b := two(rest)
		if err := unix.Symlink(a, l); err != nil {
			return err
		}
		if err := openWrite(l, unix.O_WRONLY|unix.O_TRUNC); err != nil {
			return err
		}
		if err := unix.Symlink(b, l+".swap"); err != nil {
			return err
		}
		return unix.Rename(l+".swap", l)
	case "swap-chmod": // L>A>B: symlink L->A, chmod through L, then atomically point L at B
		l, rest := two(arg)
		a, b := two(rest)
		if err := unix.Symlink(a, l); err != nil {
			return err
		}
		if err := unix.Chmod(l, 0o777); err != nil {
			return err
		}
		if err := unix.Symlink(b, l+".swap"); err != nil {
			return err
		}
		return unix.Rename(l+".swap", l)
	case "by-handle-write": // name_to_handle_at(FILE), then open_by_handle_at for writing (needs CAP_DAC_READ_SEARCH)
		h, mnt, err := unix.NameToHandleAt(unix.AT_FDCWD, arg, 0)
		if err != nil {
			return err
		}
		mfd, err := unix.Open(filepath.Dir(arg), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(mfd)
		_ = mnt // the directory's fd stands for the mount: the handle is resolved on its filesystem
		fd, err := unix.OpenByHandleAt(mfd, h, unix.O_WRONLY|unix.O_CLOEXEC)
		if err != nil {
			return err
		}
		return writeFD(fd)
	case "procsub": // what bash's <(...) does: a pipe, read back by opening /dev/fd/N (ARG: "dev" or "proc" for /proc/self/fd/N)
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return err
		}
		defer unix.Close(p[0])
		unix.Write(p[1], []byte("from-a-pipe\n"))
		unix.Close(p[1])
		name := "/dev/fd/" + strconv.Itoa(p[0])
		if arg == "proc" {
			name = "/proc/self/fd/" + strconv.Itoa(p[0])
		}
		fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		buf := make([]byte, 64)
		if n, err := unix.Read(fd, buf); err != nil || string(buf[:n]) != "from-a-pipe\n" {
			return fmt.Errorf("read %q: %v", buf[:n], err)
		}
		return nil
	case "bind-mount": // SRC>DST: bind-mount SRC over DST (needs CAP_SYS_ADMIN in the mount namespace's owner)
		src, dst := two(arg)
		return unix.Mount(src, dst, "", unix.MS_BIND, "")
	case "hide-write": // L>A: symlink L->A, write through L, close, unlink L
		l, a := two(arg)
		if err := unix.Symlink(a, l); err != nil {
			return err
		}
		if err := openWrite(l, unix.O_WRONLY|unix.O_TRUNC); err != nil {
			return err
		}
		return unix.Unlink(l)
	case "tcp":
		return dial("tcp", arg)
	case "udp":
		return sendUDP(arg)
	case "raw4":
		return sock(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	case "raw6":
		return sock(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6)
	case "ping":
		return sock(unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP)
	case "packet":
		return sock(unix.AF_PACKET, unix.SOCK_RAW, 0)
	case "listen0": // bind the IPv4 ADDR:0 (any port: the kernel picks), then listen
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		a := net.ParseIP(arg).To4()
		if a == nil {
			return unix.EINVAL
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte(a)}); err != nil {
			return err
		}
		return unix.Listen(fd, 1)
	case "netlink": // what glibc's getifaddrs and getaddrinfo(AI_ADDRCONFIG) open
		return sock(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)
	case "unix":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Connect(fd, &unix.SockaddrUnix{Name: arg})
	case "unixdg": // connect an AF_UNIX datagram socket (no datagram)
		return unixDgram(func(fd int) error { return unix.Connect(fd, &unix.SockaddrUnix{Name: arg}) })
	case "unixsendto": // sendto from an unconnected AF_UNIX datagram socket
		return unixDgram(func(fd int) error { return unix.Sendto(fd, []byte(Payload), 0, &unix.SockaddrUnix{Name: arg}) })
	case "unixsendmsg": // sendmsg with the name as msg_name
		return unixDgram(func(fd int) error {
			_, err := unix.SendmsgN(fd, []byte(Payload), nil, &unix.SockaddrUnix{Name: arg}, 0)
			return err
		})
	case "unixsendmmsg": // one sendmmsg of a datagram to each name (A>B>...)
		names := strings.Split(arg, ">")
		return unixDgram(func(fd int) error {
			n, err := testutil.UnixSendmmsg(fd, []byte(Payload), names...)
			if err == nil && n < len(names) {
				// The kernel stops at the message it refuses and
				// keeps no errno when one went before it.
				return fmt.Errorf("sent %d of %d", n, len(names))
			}
			return err
		})
	case "unixown": // bind a stream socket at the name, listen, and connect to it
		l, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(l)
		if err := unix.Bind(l, &unix.SockaddrUnix{Name: arg}); err != nil {
			return err
		}
		if err := unix.Listen(l, 1); err != nil {
			return err
		}
		return step("unix", arg)
	case "iouring":
		var params [120]byte // struct io_uring_params
		r, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
		if e != 0 {
			return e
		}
		unix.Close(int(r))
		return nil
	case "bpf": // BPF_PROG_LOAD of nothing: EINVAL/EFAULT without a wall, EPERM with one
		var attr [128]byte
		_, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
		if e != 0 {
			return e
		}
		return nil
	case "ptrace": // PTRACE_ATTACH to a pid of the agent's own namespace
		pid, _ := strconv.Atoi(arg)
		_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(pid), 0, 0, 0, 0)
		if e != 0 {
			return e
		}
		return nil
	case "cgmove": // write "0" (= the writer) to a cgroup.procs file
		return openWriteData(arg, "0")
	case "cgroup": // print the unified-hierarchy line of /proc/self/cgroup
		b, err := os.ReadFile("/proc/self/cgroup")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "0::") {
				fmt.Println("cgroup-line=" + l)
			}
		}
		return err
	case "chdir":
		return unix.Chdir(arg)
	case "readn": // read a file 2000 times (keeps the probe busy and alive)
		for i := 0; i < 2000; i++ {
			if err := step("read", arg); err != nil {
				return err
			}
		}
		return nil
	case "print":
		fmt.Println(arg)
		return nil
	case "wait-stdin":
		_, err := io.ReadAll(os.Stdin)
		return err
	case "lookup": // look NAME up (IPv4) with Go's own resolver: /etc/resolv.conf's name servers
		_, err := goResolver.LookupNetIP(context.Background(), "ip4", arg)
		return err
	case "sendn": // ADDR:PORT>N: connect (tcp), send N bytes, then read to the peer's close
		addr, n := two(arg)
		count, _ := strconv.Atoi(n)
		return sendN(addr, count)
	case "udpburst": // ADDR:PORT>N>SIZE: N datagrams of SIZE bytes, back to back, errors ignored (a full queue, a wall's drop)
		addr, rest := two(arg)
		n, size := two(rest)
		count, _ := strconv.Atoi(n)
		sz, _ := strconv.Atoi(size)
		c, err := net.Dial("udp4", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, sz)
		for range count {
			_, _ = c.Write(buf)
		}
		return nil
	case "pingsend": // ADDR: one ICMP echo from an ICMP datagram socket; "ok" when a reply came within a second
		return pingSend(arg)
	case "resolve-dial": // NAME>PORT: look NAME up, connect to its first address on PORT (tcp)
		name, port := two(arg)
		addrs, err := goResolver.LookupNetIP(context.Background(), "ip4", name)
		if err != nil {
			return err
		}
		return dial("tcp", net.JoinHostPort(addrs[0].String(), port))
	case "resolve-dial6": // NAME>PORT: look NAME's IPv6 addresses (AAAA) up, connect to the first on PORT (tcp)
		name, port := two(arg)
		addrs, err := goResolver.LookupNetIP(context.Background(), "ip6", name)
		if err != nil {
			return err
		}
		return dial("tcp", net.JoinHostPort(addrs[0].String(), port))
	case "dnsleak": // NAME: a query for NAME hiding DNSSecret besides the name, over UDP and TCP (probe_dns.go)
		return dnsLeak(arg)
	case "txtburst": // DOMAIN>N: N TXT lookups of random subdomains of DOMAIN (DNS exfiltration)
		domain, n := two(arg)
		count, _ := strconv.Atoi(n)
		for i := range count {
			_, _ = goResolver.LookupTXT(context.Background(), fmt.Sprintf("%x-%d.%s", time.Now().UnixNano(), i, domain))
		}
		return nil
	}
	if ok, err := fileStep(op, arg); ok {
		return err
	}
	return fmt.Errorf("unknown probe step %q", op)
}

func unixDgram(f func(fd int) error) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fd)
}

func openWriteData(p, data string) error {
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(data))
	return err
}

func ldso() string {
	for _, p := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "/lib64/ld-linux-x86-64.so.2"
}

func forkExec(path string, argv, env []string) error {
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return err
	}
	if ws.Signaled() {
		return fmt.Errorf("signal %v", ws.Signal())
	}
	if ws.ExitStatus() != 0 {
		return fmt.Errorf("exit %d", ws.ExitStatus())
	}
	return nil
}

func memfdExec(flags int) error {
	src, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		return err
	}
	fd, err := unix.MemfdCreate("klock-probe", unix.MFD_CLOEXEC|flags)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, src); err != nil {
		return err
	}
	return forkExec("/proc/self/fd/"+strconv.Itoa(fd), []string{"true"}, nil)
}

// goResolver is Go's own resolver (never the C library's), which reads
// /etc/resolv.conf and asks its name servers.
var goResolver = &net.Resolver{PreferGo: true}

func dial(network, addr string) error {
	c, err := net.Dial(network, addr)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			return oe.Err
		}
		return err
	}
	return c.Close()
}

// sendUDP sends one datagram with sendto (an unconnected socket).
func sendUDP(addr string) error {
	ap, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	family := unix.AF_INET
	var sa unix.Sockaddr
	if ip4 := ap.IP.To4(); ip4 != nil && !strings.Contains(addr, "[") {
		sa = &unix.SockaddrInet4{Port: ap.Port, Addr: [4]byte(ip4)}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: ap.Port, Addr: [16]byte(ap.IP.To16())}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Sendto(fd, []byte(Payload), 0, sa)
}

func sock(family, typ, proto int) error {
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// Inode flag ioctls (linux/fs.h) x/sys does not carry, and the flags the
// probe adds: nodump and noatime, which the file's owner may set.
const (
	FsIocSetflags   = 0x40086602 // FS_IOC_SETFLAGS
	FsIoc32Setflags = 0x40046602 // FS_IOC32_SETFLAGS
	fsIocFsgetxattr = 0x801c581f // FS_IOC_FSGETXATTR
	fsIocFssetxattr = 0x401c5820 // FS_IOC_FSSETXATTR
	FsNodumpFl      = 0x40       // FS_NODUMP_FL
	FsNoatimeFl     = 0x80       // FS_NOATIME_FL
)

// Flags returns p's inode flags (FS_IOC_GETFLAGS); ok is false on a file
// system without them.
func Flags(p string) (uint32, bool) {
	var v uint32
	err := onReadOnly(p, 0, func(fd int) (err error) {
		v, err = unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		return err
	})
	return v, err == nil
}

func setFlags(p string, oflags int, cmd uint) error {
	return onReadOnly(p, oflags, func(fd int) error {
		f, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		if err != nil {
			return err
		}
		v := int32(f | FsNodumpFl | FsNoatimeFl)
		return ioctlPtr(fd, cmd, unsafe.Pointer(&v))
	})
}

func onReadOnly(p string, oflags int, f func(fd int) error) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|oflags, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fd)
}

func ioctlPtr(fd int, cmd uint, p unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(cmd), uintptr(p)); e != 0 {
		return e
	}
	return nil
}

func mapExec(p string, later bool) error {
	return onReadOnly(p, 0, func(fd int) error {
		prot := unix.PROT_READ | unix.PROT_EXEC
		if later {
			prot = unix.PROT_READ
		}
		b, err := unix.Mmap(fd, 0, 4096, prot, unix.MAP_PRIVATE)
		if err != nil {
			return err
		}
		defer unix.Munmap(b)
		if later {
			return unix.Mprotect(b, unix.PROT_READ|unix.PROT_EXEC)
		}
		return nil
	})
}

// sendN sends n bytes over TCP to addr and waits for the peer to close.
func sendN(addr string, n int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			return oe.Err
		}
		return err
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	for n > 0 {
		w, err := c.Write(buf[:min(n, len(buf))])
		if err != nil {
			return err
		}
		n -= w
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_, err = io.Copy(io.Discard, c)
	return err
}

// pingSend sends one ICMP echo request to addr from an ICMP datagram
// socket (no capability needed where net.ipv4.ping_group_range allows the
// agent's group) and waits a second for the reply.
func pingSend(addr string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ip := net.ParseIP(addr).To4()
	if ip == nil {
		return fmt.Errorf("not an IPv4 address: %q", addr)
	}
	sa := &unix.SockaddrInet4{}
	copy(sa.Addr[:], ip)
	echo := []byte{8, 0, 0, 0, 0, 0, 0, 1, 'k', 'l', 'o', 'c', 'k'}
	if err := unix.Sendto(fd, echo, 0, sa); err != nil {
		return err
	}
	tv := unix.NsecToTimeval(int64(time.Second))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	buf := make([]byte, 1500)
	if _, _, err := unix.Recvfrom(fd, buf, 0); err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return errors.New("no reply")
		}
		return err
	}
	return nil
}
