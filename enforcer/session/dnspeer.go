//go:build linux

package session

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// The session's DNS proxy listens on loopback, where any process of the
// host may reach it. A query from outside the session must not count as
// the agent's (a refused name kills a strict session): peerCgroup asks the
// kernel (sock_diag) which cgroup the client's socket was made in.

const (
	inetDiagNoCookie = ^uint32(0)
	inetDiagCgroupID = 21 // INET_DIAG_CGROUP_ID (Linux 5.7)
	sizeofDiagReq    = 56 // struct inet_diag_req_v2
	sizeofDiagMsg    = 72 // struct inet_diag_msg
)

// peerCgroup returns the cgroup id of the socket on this host that sent
// from client to server (the proxy's address) over network ("udp" or
// "tcp"); IPv4 only (the proxy listens on 127.77.x.y).
func peerCgroup(network string, client, server netip.AddrPort) (uint64, error) {
	if !client.Addr().Unmap().Is4() || !server.Addr().Unmap().Is4() {
		return 0, errors.New("not IPv4")
	}
	proto := uint8(unix.IPPROTO_UDP)
	// inet_diag_sockid is looked up the way each protocol receives: UDP
	// finds the socket bound to dst:dport that src:sport sends to, TCP
	// the socket whose own end is src:sport.
	src, dst := server, client
	if network == "tcp" {
		proto, src, dst = unix.IPPROTO_TCP, client, server
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	req := make([]byte, unix.SizeofNlMsghdr+sizeofDiagReq)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1)
	b := req[unix.SizeofNlMsghdr:]
	b[0], b[1] = unix.AF_INET, proto
	ne.PutUint32(b[4:], ^uint32(0)) // every state
	id := b[8:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	s4, d4 := src.Addr().Unmap().As4(), dst.Addr().Unmap().As4()
	copy(id[4:8], s4[:])
	copy(id[20:24], d4[:])
	ne.PutUint32(id[40:], inetDiagNoCookie)
	ne.PutUint32(id[44:], inetDiagNoCookie)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, os.NewSyscallError("sendto", err)
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, os.NewSyscallError("recvfrom", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if e := int32(ne.Uint32(m.Data)); e != 0 {
					return 0, fmt.Errorf("sock_diag: %w", unix.Errno(-e))
				}
			}
			return 0, errors.New("sock_diag: error")
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(m.Data) < sizeofDiagMsg {
				return 0, errors.New("sock_diag: short answer")
			}
			attrs := m.Data[sizeofDiagMsg:]
			for len(attrs) >= 4 {
				l, typ := int(ne.Uint16(attrs[0:])), ne.Uint16(attrs[2:])
				if l < 4 || l > len(attrs) {
					break
				}
				if typ == inetDiagCgroupID && l >= 12 {
					return ne.Uint64(attrs[4:]), nil
				}
				attrs = attrs[min((l+3)&^3, len(attrs)):]
			}
			return 0, errors.New("sock_diag: no cgroup id (Linux before 5.7)")
		}
	}
	return 0, errors.New("sock_diag: no answer")
}

// inGroup says whether the cgroup id is the session's group or one below
// it (on cgroup v2 a cgroup's id is its directory's inode number).
func inGroup(id, groupID uint64, groupPath string) bool {
	if id == groupID {
		return true
	}
	found := false
	_ = filepath.WalkDir(groupPath, func(p string, d os.DirEntry, err error) error {
		if err != nil || found || !d.IsDir() {
			return nil
		}
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Ino == id {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// addrPort is a net.Addr's address and port.
func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort()
	case *net.TCPAddr:
		return a.AddrPort()
	}
	return netip.AddrPort{}
}
