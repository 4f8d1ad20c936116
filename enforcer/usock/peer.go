//go:build linux

package usock

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"golang.org/x/sys/unix"
)

// Peer is who is at the other end of a connection, as the kernel says
// (SO_PEERCRED, SO_PEERGROUPS, SO_PEERPIDFD): the credentials the peer had
// when it called connect(2), not what it claims.
type Peer struct {
	PID    int
	UID    uint32
	GID    uint32
	Groups []uint32
	// Cgroup is the peer process's cgroup v2 path (the "0::" line of
	// /proc/<pid>/cgroup), read while its pidfd proved it alive.
	Cgroup string
}

func (p Peer) String() string {
	return fmt.Sprintf("pid %d uid %d gid %d groups %v cgroup %s", p.PID, p.UID, p.GID, p.Groups, p.Cgroup)
}

// InGroup reports whether the peer's primary or supplementary groups
// include gid.
func (p Peer) InGroup(gid uint32) bool {
	return p.GID == gid || slices.Contains(p.Groups, gid)
}

// PeerOf reads the kernel's view of the peer of c. It fails closed: a peer
// whose cgroup cannot be read (it exited, or its pid was reused while we
// read) is an error, never "not in a session".
func PeerOf(c *net.UnixConn) (Peer, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var (
		p      Peer
		pidfd  = -1
		opErr  error
		ucred  *unix.Ucred
		groups []uint32
	)
	cerr := rc.Control(func(fd uintptr) {
		ucred, opErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if opErr != nil {
			return
		}
		groups, opErr = peerGroups(int(fd))
		if opErr != nil {
			return
		}
		// SO_PEERPIDFD (Linux 6.5) names the very process that connected;
		// older kernels fall back to pidfd_open of its pid, below.
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			pidfd = v
		}
	})
	if cerr != nil {
		return Peer{}, cerr
	}
	if opErr != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", opErr)
	}
	p = Peer{PID: int(ucred.Pid), UID: ucred.Uid, GID: ucred.Gid, Groups: groups}
	if pidfd < 0 {
		if pidfd, err = unix.PidfdOpen(p.PID, 0); err != nil {
			return p, fmt.Errorf("peer pid %d: pidfd_open: %w (the peer exited; its cgroup cannot be checked)", p.PID, err)
		}
	}
	defer unix.Close(pidfd)
	cg, err := readCgroup(p.PID)
	if err != nil {
		return p, err
	}
	// The pidfd pins the peer's identity: if it is still alive after the
	// read, the pid was not reused and the cgroup read was the peer's.
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return p, fmt.Errorf("peer pid %d: %w (the peer exited before its cgroup could be verified)", p.PID, err)
	}
	p.Cgroup = cg
	return p, nil
}

// peerGroups reads SO_PEERGROUPS: the peer's supplementary groups at
// connect time.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		l := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
		switch e {
		case 0:
			return buf[:l/4], nil
		case unix.ERANGE:
			if int(l/4) <= len(buf) {
				return nil, fmt.Errorf("SO_PEERGROUPS: %w", e)
			}
			buf = make([]uint32, l/4)
		case unix.ENOPROTOOPT:
			return nil, nil // before Linux 4.13: primary gid only
		default:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", e)
		}
	}
}

// readCgroup returns the cgroup v2 path of pid ("0::PATH" in
// /proc/PID/cgroup), as seen from klockd's cgroup namespace.
func readCgroup(pid int) (string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", fmt.Errorf("peer pid %d: read its cgroup: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("peer pid %d: no cgroup v2 entry in /proc/%d/cgroup", pid, pid)
}

// sessionCgroupPrefix is where klock sessions live relative to the cgroup2
// root (cgroup.Parent).
const sessionCgroupPrefix = "/" + cgroup.Parent

// InSessionCgroup reports whether a cgroup path is klock's session parent
// or below it. A path outside klockd's cgroup namespace ("/..") cannot be
// placed and counts as inside (fail closed).
func InSessionCgroup(path string) bool {
	if path == sessionCgroupPrefix || strings.HasPrefix(path, sessionCgroupPrefix+"/") {
		return true
	}
	return path == "" || strings.HasPrefix(path, "/..")
}

// ErrInSession is the refusal for a peer in a session cgroup: an agent
// must never drive klockd, whichever socket it reaches.
var ErrInSession = errors.New("the peer runs inside a klock session cgroup: an agent may never drive klockd")
