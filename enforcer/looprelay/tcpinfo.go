//go:build linux

package looprelay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A handed-over connection's bytes go through the kernel, not the relay:
// they are counted from the kernel's own counters for the socket
// (struct tcp_info), which sock_diag sends when the socket is destroyed
// (the SKNLGRP_INET_TCP_DESTROY and SKNLGRP_INET6_TCP_DESTROY groups of
// NETLINK_SOCK_DIAG: one netlink socket for the whole process, in the
// host's namespace, where every handed-over socket lives).

// The sock_diag multicast groups (<linux/sock_diag.h>), as nl_groups
// bits (group n is bit n-1), and the attribute with struct tcp_info.
const (
	sknlgrpInetTCPDestroy  = 1
	sknlgrpInet6TCPDestroy = 3
	inetDiagInfo           = 2
	inetDiagMsgLen         = 72 // struct inet_diag_msg
	inetDiagCookieOff      = 44 // idiag_cookie in struct inet_diag_msg
)

// ended are the counts of a destroyed socket.
type ended struct {
	outP, outB, inP, inB uint64
}

// destroyWatch delivers the destroyed sockets' counts to those waiting
// for them, by socket cookie (SO_COOKIE). Every TCP socket of the host
// that ends is told to it, so it listens only while a relay hands
// sockets over (acquire, release).
type destroyWatch struct {
	mu      sync.Mutex
	users   int
	f       *os.File
	waiting map[uint64]func(ended)
}

var destroyed destroyWatch

// acquire starts listening, for one more relay.
func (w *destroyWatch) acquire() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.users == 0 {
		f, err := openDestroyGroups()
		if err != nil {
			return err
		}
		w.f, w.waiting = f, map[uint64]func(ended){}
		go w.read(f)
	}
	w.users++
	return nil
}

// release stops listening once no relay needs it; the counts of sockets
// still open then are not told to anyone.
func (w *destroyWatch) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.users--; w.users == 0 {
		w.f.Close()
		w.f, w.waiting = nil, nil
	}
}

// watch calls f with the socket's counts once it is destroyed; false when
// nothing listens (sock_diag unavailable: no netlink, no permission).
func (w *destroyWatch) watch(cookie uint64, f func(ended)) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return false
	}
	w.waiting[cookie] = f
	return true
}

func (w *destroyWatch) forget(cookie uint64) {
	w.mu.Lock()
	delete(w.waiting, cookie)
	w.mu.Unlock()
}

func openDestroyGroups() (*os.File, error) {
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("looprelay: sock_diag: %w", err)
	}
	groups := uint32(1<<(sknlgrpInetTCPDestroy-1) | 1<<(sknlgrpInet6TCPDestroy-1))
	if err := unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groups}); err != nil {
		unix.Close(s)
		return nil, fmt.Errorf("looprelay: sock_diag destroy groups: %w", err)
	}
	// A deep queue, so that a burst of the host's loses none of the
	// relay's.
	_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	if err := probeTCPDiag(); err != nil {
		unix.Close(s)
		return nil, err
	}
	return os.NewFile(uintptr(s), "sock_diag"), nil
}

// probeTCPDiag asks sock_diag for a dump of no TCP socket: the kernel loads
// tcp_diag on demand where it can, and answers ENOENT where it has no TCP
// handler. Without one, no destroy notification ever comes, and a
// handed-over socket's bytes would be counted as none.
func probeTCPDiag() error {
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return fmt.Errorf("looprelay: sock_diag: %w", err)
	}
	defer unix.Close(s)
	// struct nlmsghdr + struct inet_diag_req_v2 {family, protocol, ext,
	// pad, states, id (48 bytes)}: states 0 matches no socket.
	req := make([]byte, unix.NLMSG_HDRLEN+56)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], 20) // SOCK_DIAG_BY_FAMILY
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	req[unix.NLMSG_HDRLEN] = unix.AF_INET
	req[unix.NLMSG_HDRLEN+1] = unix.IPPROTO_TCP
	if err := unix.Sendto(s, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("looprelay: sock_diag probe: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(s, buf, 0)
	if err != nil {
		return fmt.Errorf("looprelay: sock_diag probe: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return fmt.Errorf("looprelay: sock_diag probe: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
			if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
				return fmt.Errorf("looprelay: sock_diag has no TCP handler (load tcp_diag): %w", syscall.Errno(-code))
			}
		}
	}
	return nil
}

func (w *destroyWatch) read(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 1<<16)
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		if err != nil {
			return // released
		}
		if errors.Is(rerr, unix.EINTR) || errors.Is(rerr, unix.ENOBUFS) {
			continue // ENOBUFS: some were lost; the rest still count
		}
		if rerr != nil {
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			w.deliver(m.Data)
		}
	}
}

// deliver hands one destroyed socket's counts (struct inet_diag_msg and
// its attributes) to whoever waits for its cookie.
func (w *destroyWatch) deliver(b []byte) {
	if len(b) < inetDiagMsgLen {
		return
	}
	cookie := uint64(binary.NativeEndian.Uint32(b[inetDiagCookieOff:])) | uint64(binary.NativeEndian.Uint32(b[inetDiagCookieOff+4:]))<<32
	w.mu.Lock()
	f := w.waiting[cookie]
	delete(w.waiting, cookie)
	w.mu.Unlock()
	if f == nil {
		return
	}
	var info unix.TCPInfo
	for a := b[inetDiagMsgLen:]; len(a) >= 4; {
		l, typ := int(binary.NativeEndian.Uint16(a)), binary.NativeEndian.Uint16(a[2:])
		if l < 4 || l > len(a) {
			break
		}
		if typ == inetDiagInfo {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&info)), unsafe.Sizeof(info)), a[4:l])
		}
		a = a[min((l+3)&^3, len(a)):]
	}
	f(ended{
		outP: uint64(info.Data_segs_out), outB: info.Bytes_sent - info.Bytes_retrans,
		inP: uint64(info.Data_segs_in), inB: info.Bytes_received,
	})
}
