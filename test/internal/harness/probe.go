//go:build linux

package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
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

// step performs one probe step: the operation op on arg, as the table
// below (or fileStep) defines it.
func step(op, arg string) error {
	if f, ok := probeSteps[op]; ok {
		return f(arg)
	}
	if ok, err := fileStep(op, arg); ok {
		return err
	}
	return fmt.Errorf("unknown probe step %q", op)
}

// probeSteps are the probe's operations by name, each a function of the
// step's argument: the escape tests name them in their "op:arg" steps.
var probeSteps = map[string]func(arg string) error{
	"read":       readFile,
	"retry-read": retryRead,
	// an existing file, truncated, never created
	"write": func(arg string) error { return openWrite(arg, unix.O_WRONLY|unix.O_TRUNC) },
	// no O_TRUNC (device nodes)
	"writedev": func(arg string) error { return openWrite(arg, unix.O_WRONLY) },
	"append":   func(arg string) error { return openWrite(arg, unix.O_WRONLY|unix.O_APPEND) },
	"create":   func(arg string) error { return openWrite(arg, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL) },
	"mkdir":    func(arg string) error { return unix.Mkdir(arg, 0o755) },
	"mkfifo":   func(arg string) error { return unix.Mkfifo(arg, 0o644) },
	"unlink":   unix.Unlink,
	"rename": func(arg string) error {
		a, b := two(arg)
		return unix.Rename(a, b)
	},
	"exchange": func(arg string) error {
		a, b := two(arg)
		return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	},
	"link": func(arg string) error {
		a, b := two(arg)
		return unix.Link(a, b)
	},
	"symlink": func(arg string) error {
		target, p := two(arg)
		return unix.Symlink(target, p)
	},
	"trunc":    func(arg string) error { return unix.Truncate(arg, 0) },
	"chmod":    func(arg string) error { return unix.Chmod(arg, 0o777) },
	"utimes":   func(arg string) error { return unix.UtimesNano(arg, []unix.Timespec{{Sec: 1}, {Sec: 1}}) },
	"setxattr": func(arg string) error { return unix.Setxattr(arg, "user.klock", []byte("x"), 0) },
	// FS_IOC_SETFLAGS through a read-only fd: the flags read back, plus nodump and noatime
	"setflags": func(arg string) error { return setFlags(arg, 0, FsIocSetflags) },
	// the same on a directory (opened O_RDONLY|O_DIRECTORY)
	"setflags-dir": func(arg string) error { return setFlags(arg, unix.O_DIRECTORY, FsIocSetflags) },
	// the 32-bit number (FS_IOC32_SETFLAGS) from a 64-bit process
	"setflags32": func(arg string) error { return setFlags(arg, 0, FsIoc32Setflags) },
	"fsxattr":    setFsxattr,
	// map a readable file PROT_READ|PROT_EXEC (no exec: what ld.so and dlopen do)
	"mmap-exec": func(arg string) error { return mapExec(arg, false) },
	// map it PROT_READ, then mprotect it PROT_READ|PROT_EXEC
	"mprotect-exec": func(arg string) error { return mapExec(arg, true) },
	"chattr":        chattr,
	"exec":          execArgs,
	// the dynamic loader running a binary named as its argument
	"ldso": func(arg string) error { return forkExec(ldso(), []string{"ld.so", arg}, nil) },
	// memfd_create(MFD_EXEC), copy /usr/bin/true in, exec it
	"memfd-exec": func(string) error { return memfdExec(unix.MFD_EXEC) },
	// memfd_create without MFD_EXEC, then exec through /proc/self/fd
	"memfd-plain-exec": func(string) error { return memfdExec(0) },
	// DIR: make 300 directories in DIR, again (EEXIST), then remove them,
	// each name in a page another thread keeps unmapping (a BPF read of it
	// faults)
	"zapped-mkdir":     func(dir string) error { return testutil.MkdirsInZappedPage(dir, 300, true) },
	"tmpfile":          tmpfileLink,
	"reopen-write":     reopenWrite,
	"openat-write":     openatWrite,
	"cwd-write":        cwdWrite,
	"procfd-dir-write": procfdDirWrite,
	"swap-write":       swapWrite,
	"swap-chmod":       swapChmod,
	"by-handle-write":  byHandleWrite,
	"procsub":          procSub,
	// PATH: make a new file for reading and writing, write it and read it back
	"create-rw": createRW,
	// DIR: an unnamed file (O_TMPFILE) in DIR for reading and writing, written and read back
	"tmpfile-rw": tmpfileRW,
	// DIR: make, rename, chmod and mkdir by names through /proc/self/fd/N/ of DIR opened
	"procfd": procFD,
	// STEP: run the probe again through /proc/self/exe, doing STEP (a program re-executing itself)
	"selfexe":    selfExe,
	"bind-mount": bindMount,
	"hide-write": hideWrite,
	"tcp":        func(arg string) error { return dial("tcp", arg) },
	// ADDR:PORT: a blocking connect a signal keeps interrupting (probe_signal.go)
	"tcp-signalled": signalledConnect,
	"udp":           sendUDP,
	"raw4":          func(string) error { return sock(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP) },
	"raw6":          func(string) error { return sock(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6) },
	"ping":          func(string) error { return sock(unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP) },
	"packet":        func(string) error { return sock(unix.AF_PACKET, unix.SOCK_RAW, 0) },
	"listen0":       listenAnyPort,
	// what glibc's getifaddrs and getaddrinfo(AI_ADDRCONFIG) open
	"netlink": func(string) error { return sock(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE) },
	"unix":    connectUnix,
	// connect an AF_UNIX datagram socket (no datagram)
	"unixdg": func(arg string) error {
		return unixDgram(func(fd int) error { return unix.Connect(fd, &unix.SockaddrUnix{Name: arg}) })
	},
	// sendto from an unconnected AF_UNIX datagram socket
	"unixsendto": func(arg string) error {
		return unixDgram(func(fd int) error { return unix.Sendto(fd, []byte(Payload), 0, &unix.SockaddrUnix{Name: arg}) })
	},
	// sendmsg with the name as msg_name
	"unixsendmsg": func(arg string) error {
		return unixDgram(func(fd int) error {
			_, err := unix.SendmsgN(fd, []byte(Payload), nil, &unix.SockaddrUnix{Name: arg}, 0)
			return err
		})
	},
	"unixsendmmsg": unixSendmmsg,
	"unixown":      unixOwn,
	"iouring":      ioUringSetup,
	"bpf":          bpfProgLoad,
	"ptrace":       ptraceAttach,
	// write "0" (= the writer) to a cgroup.procs file
	"cgmove":     func(arg string) error { return openWriteData(arg, "0") },
	"cgroup":     printCgroupLine,
	"chdir":      unix.Chdir,
	"readn":      readN,
	"print":      func(arg string) error { fmt.Println(arg); return nil },
	"wait-stdin": func(string) error { _, err := io.ReadAll(os.Stdin); return err },
	"lookup":     lookup4,
	"sendn":      sendNArg,
	"udpburst":   udpBurst,
	// ADDR>ADDR2: connect a TCP socket to ADDR (IPv4), then the same socket to ADDR2; the second connect's error (EISCONN)
	"reconnect": reconnect,
	// ADDR: one ICMP echo from an ICMP datagram socket; "ok" when a reply came within a second
	"pingsend":     pingSend,
	"resolve-dial": resolveDial,
	// NAME>PORT: look NAME's IPv6 addresses (AAAA) up, connect to the first on PORT (tcp)
	"resolve-dial6": resolveDial6,
	// NAME: a query for NAME hiding DNSSecret besides the name, over UDP and TCP (probe_dns.go)
	"dnsleak":  dnsLeak,
	"txtburst": txtBurst,
}

// readFile reads the whole file.
func readFile(arg string) error {
	fd, err := unix.Open(arg, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = io.ReadAll(os.NewFile(uintptr(fd), arg))
	return err
}

// retryRead reads; while refused, it retries every 10 ms for up to 3 s (a
// permissive lease may open the wall).
func retryRead(arg string) error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := readFile(arg)
		if err == nil || time.Now().After(deadline) || !(errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// setFsxattr does FS_IOC_FSSETXATTR through a read-only fd: the fsxattr
// read back, plus the nodump xflag.
func setFsxattr(arg string) error {
	return onReadOnly(arg, 0, func(fd int) error {
		var fa [28]byte // struct fsxattr; fsx_xflags first (little endian)
		if err := ioctlPtr(fd, fsIocFsgetxattr, unsafe.Pointer(&fa[0])); err != nil {
			return err
		}
		fa[0] |= 0x80 // FS_XFLAG_NODUMP
		return ioctlPtr(fd, fsIocFssetxattr, unsafe.Pointer(&fa[0]))
	})
}

// chattr adds nodump and noatime (ChattrFlags) by FS_IOC_SETFLAGS on a
// read-only descriptor, as an owner may.
func chattr(arg string) error {
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
}

// execArgs runs PATH,ARG...: the path, then its argv.
func execArgs(arg string) error {
	parts := strings.Split(arg, ",")
	return forkExec(parts[0], parts, []string{"PATH=/usr/bin:/bin"})
}

// tmpfileLink opens O_TMPFILE in DIR, then linkat(/proc/self/fd/N) to DST
// (DIR>DST).
func tmpfileLink(arg string) error {
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
}

// reopenWrite opens read-only, then reopens the fd for writing through
// /proc/self/fd.
func reopenWrite(arg string) error {
	fd, err := unix.Open(arg, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return openWrite("/proc/self/fd/"+strconv.Itoa(fd), unix.O_WRONLY|unix.O_TRUNC)
}

// openatWrite opens a dirfd O_PATH, then openat(dirfd, NAME) for writing
// (DIR>NAME).
func openatWrite(arg string) error {
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
}

// cwdWrite changes to DIR and writes a relative path (DIR>REL); the cwd is
// restored after.
func cwdWrite(arg string) error {
	dir, rel := two(arg)
	old, _ := os.Getwd()
	if err := unix.Chdir(dir); err != nil {
		return err
	}
	defer unix.Chdir(old)
	return openWrite(rel, unix.O_WRONLY|unix.O_TRUNC)
}

// procfdDirWrite opens a directory fd, then /proc/self/fd/N/NAME for
// writing (DIR>NAME).
func procfdDirWrite(arg string) error {
	dir, name := two(arg)
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return openWrite("/proc/self/fd/"+strconv.Itoa(dfd)+"/"+name, unix.O_WRONLY|unix.O_TRUNC)
}

// swapWrite (L>A>B): symlink L->A, write through L, close, then atomically
// point L at B.
func swapWrite(arg string) error {
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
}

// swapChmod (L>A>B): symlink L->A, chmod through L, then atomically point L
// at B.
func swapChmod(arg string) error {
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
}

// byHandleWrite does name_to_handle_at(FILE), then open_by_handle_at for
// writing (needs CAP_DAC_READ_SEARCH).
func byHandleWrite(arg string) error {
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
}

// createRW makes PATH for reading and writing (O_RDWR|O_CREAT|O_EXCL, as
// SQLite and tempfile's w+ do), writes it and reads it back.
func createRW(p string) error {
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return writeReadBack(fd)
}

// tmpfileRW makes an unnamed file in DIR (O_TMPFILE|O_RDWR), writes it,
// reads it back, then changes its mode and size through the descriptor
// (as a SQLite temporary file is used).
func tmpfileRW(dir string) error {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := writeReadBack(fd); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, 0o644); err != nil {
		return err
	}
	return unix.Ftruncate(fd, 0)
}

func writeReadBack(fd int) error {
	if _, err := unix.Pwrite(fd, []byte("back"), 0); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if n, err := unix.Pread(fd, buf, 0); err != nil || string(buf[:n]) != "back" {
		return fmt.Errorf("read back %q: %v", buf[:n], err)
	}
	return nil
}

// procFD changes files in DIR by names written through a descriptor of
// DIR in /proc/self/fd (as Claude Code renames its temporaries): a new
// file a, renamed to b, chmodded, and a directory d.
func procFD(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	at := "/proc/self/fd/" + strconv.Itoa(fd) + "/"
	if err := openWrite(at+"a", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL); err != nil {
		return err
	}
	if err := unix.Rename(at+"a", at+"b"); err != nil {
		return err
	}
	if err := unix.Chmod(at+"b", 0o600); err != nil {
		return err
	}
	return unix.Mkdir(at+"d", 0o755)
}

// selfExe runs the probe again as /proc/self/exe with one step, and fails
// unless that step printed ok.
func selfExe(stepArg string) error {
	out, err := exec.Command("/proc/self/exe", stepArg).Output()
	if err != nil {
		return err
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), "=ok") {
		return fmt.Errorf("child: %s", out)
	}
	return nil
}

// procSub does what bash's <(...) does: a pipe, read back by opening
// /dev/fd/N (ARG: "dev", or "proc" for /proc/self/fd/N).
func procSub(arg string) error {
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
}

// bindMount (SRC>DST) bind-mounts SRC over DST (needs CAP_SYS_ADMIN in the
// mount namespace's owner).
func bindMount(arg string) error {
	src, dst := two(arg)
	return unix.Mount(src, dst, "", unix.MS_BIND, "")
}

// hideWrite (L>A): symlink L->A, write through L, close, unlink L.
func hideWrite(arg string) error {
	l, a := two(arg)
	if err := unix.Symlink(a, l); err != nil {
		return err
	}
	if err := openWrite(l, unix.O_WRONLY|unix.O_TRUNC); err != nil {
		return err
	}
	return unix.Unlink(l)
}

// listenAnyPort binds the IPv4 ADDR:0 (any port: the kernel picks), then
// listens.
func listenAnyPort(arg string) error {
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
}

// connectUnix connects an AF_UNIX stream socket to the name.
func connectUnix(arg string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: arg})
}

// unixSendmmsg sends one sendmmsg of a datagram to each name (A>B>...).
func unixSendmmsg(arg string) error {
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
}

// unixOwn binds a stream socket at the name, listens, and connects to it.
func unixOwn(arg string) error {
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
	return connectUnix(arg)
}

// ioUringSetup sets up an io_uring (a way around syscall-level walls).
func ioUringSetup(string) error {
	var params [120]byte // struct io_uring_params
	r, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
	if e != 0 {
		return e
	}
	unix.Close(int(r))
	return nil
}

// bpfProgLoad does BPF_PROG_LOAD of nothing: EINVAL/EFAULT without a wall,
// EPERM with one.
func bpfProgLoad(string) error {
	var attr [128]byte
	_, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if e != 0 {
		return e
	}
	return nil
}

// ptraceAttach does PTRACE_ATTACH to a pid of the agent's own namespace.
func ptraceAttach(arg string) error {
	pid, _ := strconv.Atoi(arg)
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(pid), 0, 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// printCgroupLine prints the unified-hierarchy line of /proc/self/cgroup.
func printCgroupLine(string) error {
	b, err := os.ReadFile("/proc/self/cgroup")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "0::") {
			fmt.Println("cgroup-line=" + l)
		}
	}
	return err
}

// readN reads a file 2000 times (keeps the probe busy and alive).
func readN(arg string) error {
	for i := 0; i < 2000; i++ {
		if err := readFile(arg); err != nil {
			return err
		}
	}
	return nil
}

// lookup4 looks NAME up (IPv4) with Go's own resolver: /etc/resolv.conf's
// name servers.
func lookup4(arg string) error {
	_, err := goResolver.LookupNetIP(context.Background(), "ip4", arg)
	return err
}

// sendNArg (ADDR:PORT>N) connects (tcp), sends N bytes, then reads to the
// peer's close.
func sendNArg(arg string) error {
	addr, n := two(arg)
	count, _ := strconv.Atoi(n)
	return sendN(addr, count)
}

// udpBurst (ADDR:PORT>N>SIZE) sends N datagrams of SIZE bytes, back to
// back, errors ignored (a full queue, a wall's drop).
func udpBurst(arg string) error {
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
}

// resolveDial (NAME>PORT) looks NAME up, then connects to its first
// address on PORT (tcp).
func resolveDial(arg string) error { return resolveDialAs("ip4", arg) }

// resolveDial6 is resolveDial with NAME's IPv6 addresses (AAAA).
func resolveDial6(arg string) error { return resolveDialAs("ip6", arg) }

func resolveDialAs(network, arg string) error {
	name, port := two(arg)
	addrs, err := goResolver.LookupNetIP(context.Background(), network, name)
	if err != nil {
		return err
	}
	return dial("tcp", net.JoinHostPort(addrs[0].String(), port))
}

// txtBurst (DOMAIN>N) does N TXT lookups of random subdomains of DOMAIN
// (DNS exfiltration).
func txtBurst(arg string) error {
	domain, n := two(arg)
	count, _ := strconv.Atoi(n)
	for i := range count {
		_, _ = goResolver.LookupTXT(context.Background(), fmt.Sprintf("%x-%d.%s", time.Now().UnixNano(), i, domain))
	}
	return nil
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

// reconnect connects a TCP socket to the first address of arg
// ("ADDR>ADDR2", IPv4), then connects it again, to the second: the
// second connect's answer is the step's (a connected socket's is
// EISCONN, whatever the destination).
func reconnect(arg string) error {
	first, second, _ := strings.Cut(arg, ">")
	sa := func(s string) (*unix.SockaddrInet4, error) {
		ap, err := netip.ParseAddrPort(s)
		if err != nil || !ap.Addr().Is4() {
			return nil, fmt.Errorf("reconnect: %q is not an IPv4 address and port", s)
		}
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}, nil
	}
	to, err := sa(first)
	if err != nil {
		return err
	}
	again, err := sa(second)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, to); err != nil {
		return err
	}
	return unix.Connect(fd, again)
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
	buf := make([]byte, 1500)
	// A signal (the Go runtime's preemption, SIGURG) interrupts the wait
	// with EINTR: wait again for what is left of the second.
	for deadline := time.Now().Add(time.Second); ; {
		left := time.Until(deadline)
		if left <= 0 {
			return errors.New("no reply")
		}
		tv := unix.NsecToTimeval(int64(left))
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		_, _, err := unix.Recvfrom(fd, buf, 0)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EAGAIN):
			return errors.New("no reply")
		case !errors.Is(err, unix.EINTR):
			return err
		}
	}
}
