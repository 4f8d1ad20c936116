package testutil

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UnixSendmmsg sends one datagram of payload to each pathname (or, with a
// leading '@', abstract) AF_UNIX name in one sendmmsg call on fd (x/sys
// has no wrapper). It returns how many the kernel sent: the kernel stops at
// the first message it refuses and reports the error only when none went.
func UnixSendmmsg(fd int, payload []byte, names ...string) (int, error) {
	addrs := make([]unix.RawSockaddrUnix, len(names))
	msgs := make([]unix.Mmsghdr, len(names))
	iov := unix.Iovec{Base: &payload[0]}
	iov.SetLen(len(payload))
	for i, n := range names {
		addrs[i].Family = unix.AF_UNIX
		b := []byte(n)
		if len(b) > 0 && b[0] == '@' {
			b[0] = 0
		}
		for j, c := range b {
			addrs[i].Path[j] = int8(c)
		}
		msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&addrs[i]))
		// The name's length, not sizeof: an abstract name has no NUL.
		msgs[i].Hdr.Namelen = uint32(2 + len(b))
		msgs[i].Hdr.Iov = &iov
		msgs[i].Hdr.SetIovlen(1)
	}
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), 0, 0, 0)
	runtime.KeepAlive(addrs)
	runtime.KeepAlive(payload)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
