package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Config is what a Proxy serves.
type Config struct {
	// Addr is the address to listen on, UDP and TCP ("127.77.1.2:53").
	Addr string
	// PacketConn and Listener, when both set, are served instead of
	// binding Addr: sockets the caller made where it wants the proxy
	// (another network namespace). Close closes them.
	PacketConn net.PacketConn
	Listener   net.Listener
	// Upstreams are the resolvers to forward to ("10.0.0.53:53"), asked in
	// order.
	Upstreams []string
	// Hosts are the declared host patterns: exact names and "*." wildcards.
	Hosts []string
	// Timeout bounds one try at one upstream (default 3s).
	Timeout time.Duration
	// OnAnswer is told each forwarded answer's addresses before the reply
	// is written; an error turns the reply into SERVFAIL. May be nil.
	OnAnswer func(Answer) error
	// OnRefused is told each refused query before the reply. May be nil.
	OnRefused func(Refusal)
	// Client, when set, says whether a query from client (over network
	// "udp" or "tcp") is one the proxy serves; any other is answered
	// REFUSED, neither forwarded nor reported.
	Client func(network string, client net.Addr) bool
}

// Answer is what one forwarded answer said about a declared name.
type Answer struct {
	Name    string // as asked, lower case, without the trailing dot
	Pattern string // the declared pattern it matched
	Qtype   uint16
	Addrs   []netip.Addr
	TTL     time.Duration // the smallest TTL on the way to the addresses
}

// Refusal is one query answered REFUSED.
type Refusal struct {
	Name   string // as asked (presentation format), without the trailing dot
	Qtype  uint16
	Client net.Addr
	Why    string
}

// Proxy is a running proxy.
type Proxy struct {
	cfg      Config
	addr     netip.AddrPort
	udp, tcp *dns.Server
	done     sync.WaitGroup
	close    sync.Once
	closeErr error
}

// Start binds cfg.Addr (UDP and TCP), or takes cfg.PacketConn and
// cfg.Listener, and serves until Close.
func Start(cfg Config) (*Proxy, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Second
	}
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("dnsproxy: no upstream resolvers")
	}
	pc, l := cfg.PacketConn, cfg.Listener
	if pc == nil || l == nil {
		var err error
		if pc, err = net.ListenPacket("udp", cfg.Addr); err != nil {
			return nil, fmt.Errorf("dnsproxy: %w", err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			pc.Close()
			return nil, fmt.Errorf("dnsproxy: %w", err)
		}
	}
	ap := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	p := &Proxy{cfg: cfg, addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
	p.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(p.serveUDP)}
	p.tcp = &dns.Server{Listener: l, Handler: dns.HandlerFunc(p.serveTCP)}
	// Close must not race the servers' start: a Shutdown before it is
	// refused and the server would then serve forever.
	var started sync.WaitGroup
	for _, s := range []*dns.Server{p.udp, p.tcp} {
		started.Add(1)
		up := sync.OnceFunc(started.Done)
		s.NotifyStartedFunc = up
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			defer up() // it never started: an error before serving
			_ = s.ActivateAndServe()
		}()
	}
	started.Wait()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() netip.AddrPort { return p.addr }

// Close stops the listeners and waits for the servers to return.
func (p *Proxy) Close() error {
	p.close.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.closeErr = errors.Join(p.udp.ShutdownContext(ctx), p.tcp.ShutdownContext(ctx))
		p.done.Wait()
	})
	return p.closeErr
}

func (p *Proxy) serveUDP(w dns.ResponseWriter, req *dns.Msg) { p.serve(w, req, "udp") }
func (p *Proxy) serveTCP(w dns.ResponseWriter, req *dns.Msg) { p.serve(w, req, "tcp") }

func (p *Proxy) refuse(w dns.ResponseWriter, req *dns.Msg, name string, qtype uint16, why string) {
	if p.cfg.OnRefused != nil {
		p.cfg.OnRefused(Refusal{Name: strings.TrimSuffix(name, "."), Qtype: qtype, Client: w.RemoteAddr(), Why: why})
	}
	m := new(dns.Msg)
	m.SetRcode(req, dns.RcodeRefused)
	_ = w.WriteMsg(m)
}

func (p *Proxy) serve(w dns.ResponseWriter, req *dns.Msg, network string) {
	if p.cfg.Client != nil && !p.cfg.Client(network, w.RemoteAddr()) {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeRefused)
		_ = w.WriteMsg(m)
		return
	}
	if req.Response || req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		p.refuse(w, req, "", 0, "not one standard query")
		return
	}
	q := req.Question[0]
	switch {
	case q.Qclass != dns.ClassINET:
		p.refuse(w, req, q.Name, q.Qtype, "class is not IN")
		return
	case !ValidName(q.Name):
		p.refuse(w, req, q.Name, q.Qtype, "malformed or over-long name")
		return
	case q.Qtype == dns.TypeANY || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR:
		p.refuse(w, req, q.Name, q.Qtype, "type "+dns.TypeToString[q.Qtype]+" is not answered")
		return
	}
	pattern, ok := Match(p.cfg.Hosts, q.Name)
	if !ok {
		p.refuse(w, req, q.Name, q.Qtype, "no NET intent declares this name")
		return
	}
	resp, err := p.forward(req, network)
	if err != nil {
		p.fail(w, req)
		return
	}
	resp.Id = req.Id
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	if addrs, ttl := addresses(resp, q.Name); len(addrs) > 0 && p.cfg.OnAnswer != nil {
		if err := p.cfg.OnAnswer(Answer{Name: name, Pattern: pattern, Qtype: q.Qtype, Addrs: addrs, TTL: ttl}); err != nil {
			p.fail(w, req)
			return
		}
	}
	if network == "udp" {
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil && int(o.UDPSize()) > size {
			size = int(o.UDPSize())
		}
		resp.Truncate(size)
	}
	_ = w.WriteMsg(resp)
}

func (p *Proxy) fail(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetRcode(req, dns.RcodeServerFailure)
	_ = w.WriteMsg(m)
}

// forward asks each upstream in turn; a truncated UDP answer is asked
// again over TCP.
func (p *Proxy) forward(req *dns.Msg, network string) (*dns.Msg, error) {
	var errs []error
	for _, up := range p.cfg.Upstreams {
		c := &dns.Client{Net: network, Timeout: p.cfg.Timeout}
		resp, _, err := c.Exchange(req, up)
		if err == nil && resp.Truncated && network == "udp" {
			c.Net = "tcp"
			resp, _, err = c.Exchange(req, up)
		}
		if err == nil {
			return resp, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// addresses follows name through the answer section's CNAMEs and returns
// the A and AAAA records found, with the smallest TTL on the way.
func addresses(resp *dns.Msg, name string) ([]netip.Addr, time.Duration) {
	chain := map[string]bool{strings.ToLower(dns.Fqdn(name)): true}
	minTTL := ^uint32(0)
	// CNAMEs may come in any order: follow until nothing new is reached
	// (bounded by the answer's size).
	for range len(resp.Answer) + 1 {
		grew := false
		for _, rr := range resp.Answer {
			if c, ok := rr.(*dns.CNAME); ok && chain[strings.ToLower(c.Hdr.Name)] && !chain[strings.ToLower(c.Target)] {
				chain[strings.ToLower(c.Target)] = true
				minTTL = min(minTTL, c.Hdr.Ttl)
				grew = true
			}
		}
		if !grew {
			break
		}
	}
	var out []netip.Addr
	for _, rr := range resp.Answer {
		var ip net.IP
		switch r := rr.(type) {
		case *dns.A:
			ip = r.A
		case *dns.AAAA:
			ip = r.AAAA
		default:
			continue
		}
		if !chain[strings.ToLower(rr.Header().Name)] {
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
			minTTL = min(minTTL, rr.Header().Ttl)
		}
	}
	if len(out) == 0 {
		return nil, 0
	}
	return out, time.Duration(minTTL) * time.Second
}
