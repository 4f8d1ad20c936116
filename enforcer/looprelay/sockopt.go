//go:build linux

package looprelay

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"
)

// intOptions are the integer socket options the host's socket takes from
// the agent's (as bypass4netns replays them): those a client sets before
// connecting and expects to hold on the connection. Each is copied only
// when it differs from a fresh socket's.
var intOptions = []struct{ level, opt int }{
	{unix.SOL_SOCKET, unix.SO_KEEPALIVE},
	{unix.SOL_SOCKET, unix.SO_REUSEADDR},
	{unix.SOL_SOCKET, unix.SO_REUSEPORT},
	{unix.SOL_SOCKET, unix.SO_OOBINLINE},
	{unix.SOL_SOCKET, unix.SO_RCVLOWAT},
	{unix.SOL_SOCKET, unix.SO_PRIORITY},
	{unix.IPPROTO_TCP, unix.TCP_NODELAY},
	{unix.IPPROTO_TCP, unix.TCP_CORK},
	{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
	{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
	{unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
	{unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
	{unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT},
	{unix.IPPROTO_TCP, unix.TCP_SYNCNT},
	{unix.IPPROTO_TCP, unix.TCP_LINGER2},
}

// copyOptions gives host (fresh, unconnected) the agent's socket options:
// intOptions, linger, timeouts, congestion control, TOS or traffic class,
// IPV6_V6ONLY, and the buffer sizes when the agent set them (they differ
// from its namespace's defaults, bufs; a set size locks the kernel's
// autotuning, so a default one is never copied). A failure leaves
// host's own value.
func copyOptions(agent, host, family int, bufs [2]int) {
	for _, o := range intOptions {
		v, err := unix.GetsockoptInt(agent, o.level, o.opt)
		if err != nil {
			continue
		}
		if w, err := unix.GetsockoptInt(host, o.level, o.opt); err == nil && w != v {
			_ = unix.SetsockoptInt(host, o.level, o.opt, v)
		}
	}
	for i, opt := range []int{unix.SO_SNDBUF, unix.SO_RCVBUF} {
		if v, err := unix.GetsockoptInt(agent, unix.SOL_SOCKET, opt); err == nil && v != bufs[i] {
			_ = unix.SetsockoptInt(host, unix.SOL_SOCKET, opt, v/2) // the kernel doubles what is set
		}
	}
	if l, err := unix.GetsockoptLinger(agent, unix.SOL_SOCKET, unix.SO_LINGER); err == nil && l.Onoff != 0 {
		_ = unix.SetsockoptLinger(host, unix.SOL_SOCKET, unix.SO_LINGER, l)
	}
	for _, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
		if tv, err := unix.GetsockoptTimeval(agent, unix.SOL_SOCKET, opt); err == nil && (tv.Sec != 0 || tv.Usec != 0) {
			_ = unix.SetsockoptTimeval(host, unix.SOL_SOCKET, opt, tv)
		}
	}
	if cc, err := unix.GetsockoptString(agent, unix.IPPROTO_TCP, unix.TCP_CONGESTION); err == nil {
		if mine, err := unix.GetsockoptString(host, unix.IPPROTO_TCP, unix.TCP_CONGESTION); err == nil && mine != cc {
			_ = unix.SetsockoptString(host, unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
		}
	}
	level, opts := unix.IPPROTO_IP, []int{unix.IP_TOS}
	if family == unix.AF_INET6 {
		level, opts = unix.IPPROTO_IPV6, []int{unix.IPV6_TCLASS, unix.IPV6_V6ONLY}
	}
	for _, opt := range opts {
		if v, err := unix.GetsockoptInt(agent, level, opt); err == nil {
			_ = unix.SetsockoptInt(host, level, opt, v)
		}
	}
}

// skfNetOff is SKF_NET_OFF: a classic BPF load relative to the network
// header (the socket's filter sees a TCP segment from its TCP header).
const skfNetOff = 0xfff00000 // -0x100000

// lockToPeer attaches to s, locked (SO_LOCK_FILTER: the agent can neither
// detach nor replace it), a socket filter that admits only segments from
// to: the service. The socket is the agent's from the handoff on, in
// the host's namespace: were it ever disconnected (a connect with
// AF_UNSPEC the relay refuses, yet racing one of the agent's threads
// that swaps fds under a call the relay let continue) and then
// connected elsewhere or made to listen, no answer from anyone else
// reaches it. The filter runs in tcp_v4_rcv/tcp_v6_rcv (tcp_filter).
func lockToPeer(s int, to netip.AddrPort) error {
	a := to.Addr()
	ld := func(k uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: k}
	}
	var words []unix.SockFilter
	var off uint32 = 12 // iphdr.saddr
	b := a.Unmap().AsSlice()
	if !a.Unmap().Is4() {
		off = 8 // ipv6hdr.saddr
	}
	for i := 0; i < len(b); i += 4 {
		words = append(words, ld(skfNetOff+off+uint32(i)), unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: binary.BigEndian.Uint32(b[i:])})
	}
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 0}, // tcphdr.source
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: uint32(to.Port())},
	}
	prog = append(prog, words...)
	// Every comparison falls to the drop at the end when it fails.
	n := len(prog)
	for i := 1; i < n; i += 2 {
		prog[i].Jf = uint8(n - i) // to "ret 0", past "ret all"
	}
	prog = append(prog,
		unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff},
		unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: 0})
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.SetsockoptSockFprog(s, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fp); err != nil {
		return err
	}
	return unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_LOCK_FILTER, 1)
}
