//go:build linux

package looprelay

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// maxSocks mirrors LR_MAX_SOCKS in bpf/looprelay.bpf.c: two per flow.
const maxSocks = 16384

// gateLowat is the SO_RCVLOWAT a socket holds while its flow is being
// spliced: the kernel calls the socket's data-ready (and with it the
// verdict program) only once that much is queued, so nothing is
// redirected before both sockets are in the map. The kernel caps it at
// half of tcp_rmem's maximum. Setting it back to 1 runs the verdict on
// what is already queued.
const gateLowat = 1 << 30

// splicer is the process's sockmap: loaded once, shared by every Relay
// (socket cookies are unique across namespaces).
type splicer struct {
	objs looprelayObjects
}

var spl struct {
	once sync.Once
	s    *splicer
	err  error
}

// loadSplicer loads the verdict program and its maps, and attaches the
// program to the socket map, once per process; the error says why the
// relay copies in user space instead.
func loadSplicer() (*splicer, error) {
	spl.once.Do(func() { spl.s, spl.err = newSplicer() })
	return spl.s, spl.err
}

func newSplicer() (*splicer, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("looprelay: sockmap: memlock: %w", err)
	}
	s := &splicer{}
	if err := loadLooprelayObjects(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("looprelay: sockmap: load: %w", err)
	}
	err := link.RawAttachProgram(link.RawAttachProgramOptions{
		Target:  s.objs.LrSocks.FD(),
		Program: s.objs.LrVerdict,
		Attach:  ebpf.AttachSkSKBStreamVerdict,
	})
	if err != nil {
		s.objs.Close()
		return nil, fmt.Errorf("looprelay: sockmap: attach the stream verdict: %w", err)
	}
	return s, nil
}

// half is one socket of a spliced flow: a descriptor of the relay's own
// (out of Go's poller, which would otherwise wake on every skb the kernel
// moves), its cookie (the key in both maps), and where its written count
// started.
type half struct {
	fd     int
	cookie uint64
	base   uint64
}

// detach takes c's socket out of Go's hands: a duplicate descriptor,
// then c closed (the socket lives on through the duplicate).
func detach(c net.Conn) (int, error) {
	sc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := sc.Control(func(raw uintptr) {
		fd, derr = unix.FcntlInt(raw, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	return fd, nil
}

// written is how many bytes the socket's sender has taken so far: acked
// plus still in its send queue. Read in that order it can only come out
// short (an ack between the two reads moves bytes from the queue to
// acked), never long: a caller waiting for it to reach a count waits a
// little longer, never too little.
func written(fd int) (uint64, error) {
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, err
	}
	q, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
	if err != nil {
		return 0, err
	}
	return ti.Bytes_acked + uint64(q), nil
}

// splice puts the two sockets of a flow in the sockmap, each the other's
// peer. in and out are closed (their sockets held by the returned
// halves) on success, left open on error, the splicer's maps as before.
func (s *splicer) splice(in, out net.Conn) (hin, hout half, err error) {
	hin.fd, hout.fd = -1, -1
	defer func() {
		if err != nil {
			for _, h := range []half{hin, hout} {
				if h.fd >= 0 {
					unix.Close(h.fd)
				}
			}
		}
	}()
	if hin.fd, err = detach(in); err != nil {
		return hin, hout, err
	}
	if hout.fd, err = detach(out); err != nil {
		return hin, hout, err
	}
	for _, h := range []*half{&hin, &hout} {
		if h.cookie, err = unix.GetsockoptUint64(h.fd, unix.SOL_SOCKET, unix.SO_COOKIE); err != nil {
			return hin, hout, fmt.Errorf("SO_COOKIE: %w", err)
		}
		if h.base, err = written(h.fd); err != nil {
			return hin, hout, err
		}
		if err = unix.SetsockoptInt(h.fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, gateLowat); err != nil {
			return hin, hout, fmt.Errorf("SO_RCVLOWAT: %w", err)
		}
	}
	ungate := func() error {
		return errors.Join(
			unix.SetsockoptInt(hin.fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1),
			unix.SetsockoptInt(hout.fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1))
	}
	undo := func() {
		s.objs.LrSocks.Delete(hin.cookie)
		s.objs.LrSocks.Delete(hout.cookie)
		s.objs.LrFlows.Delete(hin.cookie)
		s.objs.LrFlows.Delete(hout.cookie)
		_ = ungate()
	}
	if err = s.objs.LrFlows.Update(hin.cookie, looprelayLrFlow{Peer: hout.cookie}, ebpf.UpdateNoExist); err == nil {
		err = s.objs.LrFlows.Update(hout.cookie, looprelayLrFlow{Peer: hin.cookie}, ebpf.UpdateNoExist)
	}
	if err == nil {
		err = s.objs.LrSocks.Update(hout.cookie, uint64(hout.fd), ebpf.UpdateNoExist)
	}
	if err == nil {
		err = s.objs.LrSocks.Update(hin.cookie, uint64(hin.fd), ebpf.UpdateNoExist)
	}
	if err != nil {
		undo()
		return hin, hout, fmt.Errorf("sockmap: %w", err)
	}
	// Both in: what is queued (and all that follows) goes to the peer.
	if err = ungate(); err != nil {
		undo()
		return hin, hout, fmt.Errorf("SO_RCVLOWAT: %w", err)
	}
	in.Close()
	out.Close()
	return hin, hout, nil
}

// received is what the verdict program handed from h's socket to its
// peer.
func (s *splicer) received(h half) (packets, bytes uint64) {
	var f looprelayLrFlow
	if err := s.objs.LrFlows.Lookup(h.cookie, &f); err != nil {
		return 0, 0
	}
	return f.Packets, f.Bytes
}

// forget removes h's flow entry (its socket leaves the socket map when
// closed).
func (s *splicer) forget(h half) {
	_ = s.objs.LrFlows.Delete(h.cookie)
}

// splice hands a TCP flow to the kernel; false: it is to be copied (no
// sockmap on this host, or this flow could not be put in it; Path says
// why). in and out belong to the flow from true on.
func (r *Relay) splice(in, out net.Conn, c *counts, owned netip.AddrPort) bool {
	if r.spl == nil || r.noSplice {
		return false
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	if r.watch == nil {
		w, err := newWatcher()
		if err != nil {
			r.mu.Unlock()
			r.failed(err)
			return false
		}
		r.watch = w
		r.wg.Add(1)
		go r.loop(w)
	}
	r.mu.Unlock()
	hin, hout, err := r.spl.splice(in, out)
	if err != nil {
		r.failed(err)
		return false
	}
	f := &flow{c: c, in: hin, out: hout, owned: owned}
	r.mu.Lock()
	closed := r.closed
	if !closed {
		r.spliced[f] = true
	}
	r.mu.Unlock()
	if closed {
		r.endFlow(f)
	} else if err := r.watch.watch(f); err != nil {
		// Unwatched, its ends would go unseen: closed now, as a flow
		// whose dial failed.
		r.failed(err)
		r.endFlow(f)
	}
	return true
}

// failed records a flow the relay could not splice (it copies it).
func (r *Relay) failed(err error) {
	r.splitErrs.Add(1)
	r.lastErr.Store(err)
}

// Path says how the relay carries TCP: "sockmap" (spliced in the kernel)
// or "copy" (in klock's process), with why and how often it fell back.
func (r *Relay) Path() string {
	switch {
	case r.noSplice:
		return "copy (user space): splicing turned off"
	case r.spl == nil:
		return "copy (user space): " + r.splErr.Error()
	}
	if n := r.splitErrs.Load(); n > 0 {
		return fmt.Sprintf("sockmap (spliced in the kernel); %d flow(s) copied in user space, the last because: %v", n, r.lastErr.Load())
	}
	return "sockmap (spliced in the kernel)"
}
