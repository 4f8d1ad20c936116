//go:build linux

package looprelay

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's seccomp user notification structures
// (<linux/seccomp.h>, seccomp_unotify(2)); x/sys has the ioctl numbers
// and flags but not these.

// seccompData is struct seccomp_data.
type seccompData struct {
	nr   int32
	arch uint32
	ip   uint64
	args [6]uint64
}

// seccompNotif is struct seccomp_notif.
type seccompNotif struct {
	id    uint64
	pid   uint32
	flags uint32
	data  seccompData
}

// seccompResp is struct seccomp_notif_resp.
type seccompResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// seccompAddfd is struct seccomp_notif_addfd.
type seccompAddfd struct {
	id         uint64
	flags      uint32
	srcfd      uint32
	newfd      uint32
	newfdFlags uint32
}

func ioctlPtr(fd int, req uint, p unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(p))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

func notifRecv(fd int, n *seccompNotif) error {
	*n = seccompNotif{} // the kernel refuses a struct that is not zero
	return ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(n))
}

// listenerFD makes the answering ioctls on the listener, holding it open
// for each call only: closing it (Relay.Close) waits for a call in
// progress, never for a whole answer (a connect of up to connectTimeout).
type listenerFD struct{ rc syscall.RawConn }

func (l listenerFD) ioctl(req uint, p unsafe.Pointer) error {
	var e error
	if err := l.rc.Control(func(fd uintptr) { e = ioctlPtr(int(fd), req, p) }); err != nil {
		return err
	}
	return e
}

func notifValid(l listenerFD, id uint64) bool {
	return l.ioctl(unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) == nil
}

// notifContinue lets the syscall run as the agent made it.
func notifContinue(l listenerFD, id uint64) error {
	r := seccompResp{id: id, flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
	return l.ioctl(unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&r))
}

// notifReturn answers the syscall: it returns 0, or fails with errno.
func notifReturn(l listenerFD, id uint64, errno unix.Errno) error {
	r := seccompResp{id: id, error: -int32(errno)}
	return l.ioctl(unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&r))
}

// notifAddfd puts src in the agent's fd table at newfd, replacing what
// was there (SECCOMP_ADDFD_FLAG_SETFD, Linux 5.9).
func notifAddfd(l listenerFD, id uint64, src, newfd int, cloexec bool) error {
	a := seccompAddfd{id: id, flags: unix.SECCOMP_ADDFD_FLAG_SETFD, srcfd: uint32(src), newfd: uint32(newfd)}
	if cloexec {
		a.newfdFlags = unix.O_CLOEXEC
	}
	return l.ioctl(unix.SECCOMP_IOCTL_NOTIF_ADDFD, unsafe.Pointer(&a))
}

// pidfdThread is PIDFD_THREAD (Linux 6.9): a pidfd for a thread that is
// not its group's leader.
const pidfdThread = unix.O_EXCL

// openTask opens a pidfd for the thread tid (a notification's pid): the
// thread itself where the kernel allows, else its thread group, whose fd
// table its threads share unless one unshared it.
func openTask(tid int) (int, error) {
	fd, err := unix.PidfdOpen(tid, pidfdThread)
	if err == nil {
		return fd, nil
	}
	tgid, terr := threadGroup(tid)
	if terr != nil {
		return -1, err
	}
	return unix.PidfdOpen(tgid, 0)
}

func threadGroup(tid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no Tgid in /proc/%d/status", tid)
}

// fdCloexec reports whether the agent's fd is close-on-exec (its
// fdinfo's flags), which the fd put in its place keeps.
func fdCloexec(tid, fd int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return true
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			f, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			return err != nil || f&unix.O_CLOEXEC != 0
		}
	}
	return true
}

// errShortAddr: the sockaddr is not one the relay reads (too short for
// its family, or longer than any).
var errShortAddr = errors.New("looprelay: sockaddr out of range")

// sockaddrStorage is sizeof(struct sockaddr_storage): the longest
// sockaddr connect(2) takes (move_addr_to_kernel).
const sockaddrStorage = 128

// readSockaddr copies the agent's sockaddr (addrlen bytes at ptr) out of
// its memory, once: the decision and the connect both use this copy.
func readSockaddr(tid int, ptr, addrlen uint64) ([]byte, error) {
	if addrlen < 2 || addrlen > sockaddrStorage {
		return nil, errShortAddr
	}
	b := make([]byte, addrlen)
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(len(b))
	remote := []unix.RemoteIovec{{Base: uintptr(ptr), Len: int(addrlen)}}
	n, err := unix.ProcessVMReadv(tid, local, remote, 0)
	if err != nil {
		return nil, err
	}
	if n != len(b) {
		return nil, errShortAddr
	}
	return b, nil
}

// parseSockaddr reads an AF_INET or AF_INET6 sockaddr (as the kernel
// does: the family from the first two bytes, the port in network order,
// the minimum lengths of inet_stream_connect).
func parseSockaddr(b []byte) (family int, ap netip.AddrPort, ok bool) {
	family = int(*(*uint16)(unsafe.Pointer(&b[0])))
	switch {
	case family == unix.AF_INET && len(b) >= unix.SizeofSockaddrInet4:
		a := netip.AddrFrom4([4]byte(b[4:8]))
		return family, netip.AddrPortFrom(a, uint16(b[2])<<8|uint16(b[3])), true
	case family == unix.AF_INET6 && len(b) >= 24: // SIN6_LEN_RFC2133
		a := netip.AddrFrom16([16]byte(b[8:24]))
		return family, netip.AddrPortFrom(a, uint16(b[2])<<8|uint16(b[3])), true
	}
	return family, netip.AddrPort{}, false
}
