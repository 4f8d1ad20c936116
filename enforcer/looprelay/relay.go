//go:build linux

package looprelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/internal/netnsdo"
	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

// Errors.
var (
	ErrTooWide = errors.New("looprelay: port range too wide to relay")
	ErrClosed  = errors.New("looprelay: closed")
)

// MaxPorts is the widest port range Add relays (one listener per port).
const MaxPorts = 16

// udpIdle is how long a UDP flow with no datagram either way is kept.
const udpIdle = 2 * time.Minute

// Counts are what the relay carried for one peer: out of the session
// (to the host's service) and into it. Packets are datagrams for UDP and
// reads (of at most 256 KiB) for TCP. Out* is what reached the service;
// Over* what the agent sent past the egress budget, which the relay held
// (never forwarded): the agent sent Out + Over.
//
// Handed counts the TCP connections handed a socket of the host's
// (HandOff: the kernel carries their bytes, counted from its tcp_info);
// Copied the flows the relay copied (TCP connections, UDP flows).
type Counts struct {
	OutPackets, OutBytes, InPackets, InBytes uint64
	OverPackets, OverBytes                   uint64
	Handed, Copied                           uint64
	// Uncounted: handed connections whose bytes the kernel could not
	// report (sock_diag unavailable), or had not yet when read.
	Uncounted uint64
}

type counts struct {
	outP, outB, inP, inB, overP, overB atomic.Uint64
	handed, copied                     atomic.Uint64
	uncounted                          atomic.Uint64
}

// Relay is one session's set of loopback relays.
type Relay struct {
	ns *os.File // the agent's network namespace

	mu     sync.Mutex
	closed bool
	keys   map[string]bool // "tcp 127.0.0.1:8080"
	// tcp: the TCP services relayed, by address (unmapped), for HandOff.
	tcp     map[netip.AddrPort]*counts
	closers []io.Closer
	byName  map[string]*counts
	wg      sync.WaitGroup
	flows   map[net.Conn]bool // open TCP connections, both ends
	// sources: the sockets the agent's bytes arrive on (UDP listeners,
	// accepted TCP connections), for Settle.
	sources map[syscall.Conn]bool
	// owned are the host-side ends of the relay's flows.
	owned sync.Map // netip.AddrPort -> struct{}

	// The egress budget (budget.go): out bytes of every flow, the limit
	// on them, whether it was reached, and whom to tell.
	sent, limit atomic.Uint64
	spent       atomic.Bool
	over        func()
	done        chan struct{} // closed by Close: a held flow lets go

	// The handoff (handoff.go): the namespace's cookie and default TCP
	// buffer sizes, and whether the kernel refused an addfd.
	nsCookie uint64
	nsBufs   [2]int
	noAddfd  atomic.Bool
	// live: handed-over sockets whose bytes are not counted yet (the
	// kernel has not destroyed them).
	live atomic.Int64
	// restarts: connects answered while their thread was out of the
	// call (restartKey -> restart), for the restarted call.
	restarts sync.Map
	// handing: the answers under way that put a socket in place of an
	// agent's fd (restartKey → a channel closed once restarts holds what
	// the thread's restarted call gets, if it needs it).
	handing sync.Map
	// counting: the relay holds destroyed (tcpinfo.go), released by Close.
	counting bool
	// report is told of the connects the relay answers itself (Report);
	// answering counts the trapped connects being answered.
	report    func(event.Event)
	answering atomic.Int64
}

// New opens the network namespace of pid (the agent's, or its stage 2's
// before the exec).
func New(pid int, opts ...Option) (*Relay, error) {
	return Open(fmt.Sprintf("/proc/%d/ns/net", pid), opts...)
}

// Open opens the network namespace at path (a /proc/<pid>/ns/net, a
// /proc/self/fd/<fd> of a namespace handle).
func Open(path string, opts ...Option) (*Relay, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("looprelay: the agent's network namespace: %w", err)
	}
	r := &Relay{ns: f, keys: map[string]bool{}, tcp: map[netip.AddrPort]*counts{}, byName: map[string]*counts{}, flows: map[net.Conn]bool{}, sources: map[syscall.Conn]bool{}, done: make(chan struct{})}
	r.limit.Store(noLimit)
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// inNS runs f on a thread moved into the namespace, then moved back
// (netnsdo.Do). Sockets f makes stay in the namespace.
func (r *Relay) inNS(f func() error) error {
	if err := netnsdo.Do(r.ns, f); err != nil {
		return fmt.Errorf("looprelay: %w", err)
	}
	return nil
}

// Add relays addr:port..., for each port of ports and each protocol of
// proto (ProtoAny: tcp and udp), from the namespace to the host, counted
// under name.
func (r *Relay) Add(name string, addr netip.Addr, ports policy.PortRange, proto policy.Proto) error {
	if n := int(ports.Hi) - int(ports.Lo) + 1; n > MaxPorts || ports.Lo == 0 {
		return fmt.Errorf("%w: %s ports %s (at most %d, not 0)", ErrTooWide, addr, ports, MaxPorts)
	}
	nets := []string{"tcp", "udp"}
	switch proto {
	case policy.ProtoTCP:
		nets = nets[:1]
	case policy.ProtoUDP:
		nets = nets[1:]
	}
	for p := int(ports.Lo); p <= int(ports.Hi); p++ {
		for _, n := range nets {
			if err := r.add(name, n, netip.AddrPortFrom(addr.Unmap(), uint16(p))); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Relay) add(name, network string, ap netip.AddrPort) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	key := network + " " + ap.String()
	if r.keys[key] {
		return nil
	}
	c := r.byName[name]
	if c == nil {
		c = &counts{}
		r.byName[name] = c
	}
	var ln net.Listener
	var pc net.PacketConn
	err := r.inNS(func() error {
		var err error
		if network == "tcp" {
			ln, err = net.Listen("tcp", ap.String())
		} else {
			pc, err = net.ListenPacket("udp", ap.String())
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("looprelay: listen on %s/%s in the session's namespace: %w", ap, network, err)
	}
	r.keys[key] = true
	r.wg.Add(1)
	if ln != nil {
		r.tcp[ap] = c
		r.closers = append(r.closers, ln)
		go r.serveTCP(ln, ap, c)
	} else {
		r.closers = append(r.closers, pc)
		if sc, ok := pc.(syscall.Conn); ok {
			r.sources[sc] = true
			deepReceiveBuffer(sc)
		}
		go r.serveUDP(pc, ap, c)
	}
	return nil
}

// Owns reports whether a is the host-side end of one of the relay's flows.
func (r *Relay) Owns(a netip.AddrPort) bool {
	_, ok := r.owned.Load(netip.AddrPortFrom(a.Addr().Unmap(), a.Port()))
	return ok
}

func (r *Relay) own(c net.Conn) netip.AddrPort {
	var a netip.AddrPort
	switch l := c.LocalAddr().(type) {
	case *net.TCPAddr:
		a = l.AddrPort()
	case *net.UDPAddr:
		a = l.AddrPort()
	}
	a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	r.owned.Store(a, struct{}{})
	return a
}

func (r *Relay) serveTCP(ln net.Listener, to netip.AddrPort, c *counts) {
	defer r.wg.Done()
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer in.Close()
			d := net.Dialer{Timeout: 10 * time.Second}
			out, err := d.DialContext(context.Background(), "tcp", to.String())
			if err != nil {
				return // the agent sees its connection closed, as a refused one
			}
			defer out.Close()
			c.copied.Add(1)
			if !r.track(in, out) {
				return
			}
			defer r.untrack(in, out)
			if sc, ok := in.(syscall.Conn); ok {
				r.mu.Lock()
				r.sources[sc] = true
				r.mu.Unlock()
				defer func() {
					r.mu.Lock()
					delete(r.sources, sc)
					r.mu.Unlock()
				}()
			}
			a := r.own(out)
			defer r.owned.Delete(a)
			done := make(chan struct{})
			go func() {
				r.pipe(out, in, &c.outP, &c.outB, c)
				close(done)
			}()
			r.pipe(in, out, &c.inP, &c.inB, nil)
			<-done
		}()
	}
}

// track registers a connection's two ends, closed by Close; false once
// closed.
func (r *Relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	for _, c := range cs {
		r.flows[c] = true
	}
	return true
}

func (r *Relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.flows, c)
	}
}

// pipe copies from src to dst, counting every read, then half-closes dst.
// Out of the session (egress: the peer's counts), what the budget refuses
// is not written, counted as over, and the flow is held until Close.
// (A kernel splice between the two connections, or a sockmap redirect,
// measured slower here; see the package doc.)
func (r *Relay) pipe(dst, src net.Conn, packets, bytes *atomic.Uint64, egress *counts) {
	buf := make([]byte, 256<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			m := n
			if egress != nil {
				m = r.spend(n)
			}
			// Delivered and held are counted apart: the log says what
			// reached the service, never what the agent only tried.
			if m > 0 {
				packets.Add(1)
				bytes.Add(uint64(m))
			}
			if m < n {
				egress.overP.Add(1)
				egress.overB.Add(uint64(n - m))
			}
			if _, werr := dst.Write(buf[:m]); werr != nil {
				break
			}
			if m < n {
				<-r.done
				return
			}
		}
		if err != nil {
			break
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

func (r *Relay) serveUDP(pc net.PacketConn, to netip.AddrPort, c *counts) {
	defer r.wg.Done()
	var mu sync.Mutex
	flows := map[string]net.Conn{}
	defer func() {
		mu.Lock()
		for _, f := range flows {
			f.Close()
		}
		mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if r.spend(n) < n {
			// Past the budget: a datagram goes whole or not at all, and
			// one that does not go is counted as sent, not delivered.
			c.overP.Add(1)
			c.overB.Add(uint64(n))
			continue
		}
		c.outP.Add(1)
		c.outB.Add(uint64(n))
		mu.Lock()
		up := flows[from.String()]
		if up == nil {
			if up, err = net.Dial("udp", to.String()); err != nil {
				mu.Unlock()
				continue
			}
			flows[from.String()] = up
			c.copied.Add(1)
			a := r.own(up)
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer r.owned.Delete(a)
				b := make([]byte, 64<<10)
				for {
					_ = up.SetReadDeadline(time.Now().Add(udpIdle))
					m, err := up.Read(b)
					if errors.Is(err, unix.ECONNREFUSED) {
						continue // an earlier datagram found no listener: keep the flow
					}
					if err != nil {
						break
					}
					c.inP.Add(1)
					c.inB.Add(uint64(m))
					_, _ = pc.WriteTo(b[:m], from)
				}
				mu.Lock()
				delete(flows, from.String())
				mu.Unlock()
				up.Close()
			}()
		}
		mu.Unlock()
		_, _ = up.Write(buf[:n])
	}
}

// Counters are the counts by the names given to Add.
func (r *Relay) Counters() map[string]Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Counts, len(r.byName))
	for n, c := range r.byName {
		out[n] = Counts{OutPackets: c.outP.Load(), OutBytes: c.outB.Load(), InPackets: c.inP.Load(), InBytes: c.inB.Load(),
			OverPackets: c.overP.Load(), OverBytes: c.overB.Load(), Handed: c.handed.Load(), Copied: c.copied.Load(),
			Uncounted: c.uncounted.Load()}
	}
	return out
}

// Settle waits, for at most max, until the relay has read everything the
// agent sent that is still queued on its sockets (a UDP listener's
// datagrams, an accepted connection's bytes), or the budget is spent (a
// held flow is read no further): once the agent has exited, Counters then
// count all it sent. The session reads them so before its verdict.
func (r *Relay) Settle(max time.Duration) {
	deadline := time.Now().Add(max)
	quiet := 0
	// A held flow (TCP past the budget) is read no further: once the
	// budget is spent and something went over it, the verdict is known.
	// Spent exactly to the byte, what is still queued decides.
	for time.Now().Before(deadline) && !(r.spent.Load() && r.anyOver()) {
		r.mu.Lock()
		queued := false
		for sc := range r.sources {
			queued = queued || pending(sc)
		}
		r.mu.Unlock()
		// Twice empty a millisecond apart: a read that emptied the
		// queue has been counted.
		if quiet++; queued {
			quiet = 0
		}
		if quiet >= 2 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// anyOver says whether any flow sent past the budget.
func (r *Relay) anyOver() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.byName {
		if c.overB.Load() > 0 {
			return true
		}
	}
	return false
}

// pending says whether a socket's receive queue holds anything
// (SO_MEMINFO's receive allocation).
func pending(sc syscall.Conn) bool {
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var mem [unix.SK_MEMINFO_VARS]uint32
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		l := uint32(unsafe.Sizeof(mem))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO, uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0)
		if e != 0 {
			gerr = e
		}
	}); err != nil || gerr != nil {
		return false
	}
	return mem[unix.SK_MEMINFO_RMEM_ALLOC] > 0
}

// AddfdRefused reports whether the handoff stopped: the kernel refused
// an addfd, or the namespace could not be read; every connect since
// continued to the copying relay.
func (r *Relay) AddfdRefused() bool { return r.noAddfd.Load() }

// WaitCounted waits, for at most max, until every handed-over socket's
// bytes are counted: the kernel destroys a socket once the agent (and
// every process it shared it with) closed it and TCP is done with it.
// The session calls it after the agent exited, before reading Counters.
func (r *Relay) WaitCounted(max time.Duration) {
	deadline := time.Now().Add(max)
	for r.live.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// Uncounted says how many handed-over connections' bytes are not in
// Counters: those sock_diag could not report, and those still open.
func (r *Relay) Uncounted() (unreported, open uint64) {
	for _, c := range r.Counters() {
		unreported += c.Uncounted
	}
	return unreported, uint64(max(r.live.Load(), 0))
}

// Listening lists what the relay listens on ("tcp 127.0.0.1:8080").
func (r *Relay) Listening() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k := range r.keys {
		out = append(out, k)
	}
	return out
}

// Close stops every listener and flow and waits for them. It may be
// called again.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	for _, c := range r.closers {
		c.Close()
	}
	for c := range r.flows {
		c.Close()
	}
	r.mu.Unlock()
	// Flows end when either side closes: the agent is gone by now, and the
	// namespace's sockets with it; the host side gets EOF or its deadline.
	r.wg.Wait()
	if r.counting {
		destroyed.release()
	}
	if r.ns == nil {
		return nil
	}
	return r.ns.Close()
}

// udpReceiveBuffer is the receive buffer of a relayed UDP service's
// socket. A datagram the kernel drops because the buffer is full is
// counted nowhere the relay can see, so neither delivered nor sent: an
// agent that bursts past the egress budget faster than the relay reads
// must find room for its burst, for the budget to see it (a 200 x 1 kB
// burst overflowed the default).
const udpReceiveBuffer = 8 << 20

// deepReceiveBuffer gives sc a receive buffer of udpReceiveBuffer, past
// net.core.rmem_max (klock runs as root), else as much as the limit lets.
func deepReceiveBuffer(sc syscall.Conn) {
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, udpReceiveBuffer) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, udpReceiveBuffer)
		}
	})
}
