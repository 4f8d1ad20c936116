package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
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
	// Declared are the prefixes of the manifest's address intents (an
	// exact address is a /32 or /128): an answered address in one of them
	// is given to the agent whatever its range (Classify).
	Declared []netip.Prefix
	// Local, when set, adds addresses an answer must not hold to this
	// host's interfaces' (read at each answer): the session's veth pair.
	Local func() []netip.Addr
	// Timeout bounds one try at one upstream (default 3s).
	Timeout time.Duration
	// OnAnswer is told each forwarded answer's addresses before the reply
	// is written; an error turns the reply into SERVFAIL. May be nil.
	OnAnswer func(Answer) error
	// OnRefused is told each refused query before the reply. May be nil.
	OnRefused func(Refusal)
	// OnRebinding is told each answered address withheld from the agent
	// (Classify) before the reply. May be nil.
	OnRebinding func(Rebinding)
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
	TTL     time.Duration // the smallest TTL on the way to the addresses (capped: MaxTTL)
}

// Refusal is one query answered REFUSED.
type Refusal struct {
	Name    string // as asked (presentation format), without the trailing dot
	Qtype   uint16
	Client  net.Addr
	Network string // "udp" or "tcp": the transport the query came on
	Why     string
}

// Rebinding is one answered address withheld from the agent: the answer
// for a declared name pointed into the host, its link or a private range.
type Rebinding struct {
	Name    string // as asked, lower case, without the trailing dot
	Pattern string // the declared pattern it matched
	Qtype   uint16
	Addr    netip.Addr
	Why     string // Classify's reason
	Client  net.Addr
	Network string // "udp" or "tcp"
}

// MaxTTL caps the TTLs the agent is told and the one OnAnswer is told.
// The wall stays open to an answer's addresses for its TTL (plus the
// session's grace): an upstream's day-long TTL would keep it open a day
// after one lookup, and an answer since changed would stay in the agent's
// cache as long. Five minutes costs the agent one local query per name
// every five minutes.
const MaxTTL = 300 * time.Second

// upstreamUDPSize is the EDNS0 payload size the proxy advertises, to its
// upstreams and to its clients: DNS Flag Day 2020's 1232 bytes, which no
// IPv6 path fragments (RFC 8200's 1280-byte minimum MTU); a bigger answer
// comes over TCP (RFC 7766).
const upstreamUDPSize = 1232

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
		if pc, l, err = listenBoth(cfg.Addr); err != nil {
			return nil, err
		}
	}
	ap := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	p := &Proxy{cfg: cfg, addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
	// UDPSize: a query is read whole up to the largest datagram (the
	// library reads 512 bytes by default, and a longer EDNS query was
	// answered FORMERR).
	p.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(p.serveUDP), UDPSize: dns.MaxMsgSize}
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

func (p *Proxy) refuse(w dns.ResponseWriter, req *dns.Msg, network, name string, qtype uint16, why string) {
	if p.cfg.OnRefused != nil {
		p.cfg.OnRefused(Refusal{Name: strings.TrimSuffix(name, "."), Qtype: qtype, Client: w.RemoteAddr(), Network: network, Why: why})
	}
	p.reply(w, req, network, dns.RcodeRefused)
}

// reply answers req with rcode and no records.
func (p *Proxy) reply(w dns.ResponseWriter, req *dns.Msg, network string, rcode int) {
	m := new(dns.Msg)
	m.SetRcode(req, rcode)
	p.write(w, req, network, m)
}

func (p *Proxy) serve(w dns.ResponseWriter, req *dns.Msg, network string) {
	if p.cfg.Client != nil && !p.cfg.Client(network, w.RemoteAddr()) {
		p.reply(w, req, network, dns.RcodeRefused)
		return
	}
	if req.Response || req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		p.refuse(w, req, network, "", 0, "not one standard query")
		return
	}
	if o := req.IsEdns0(); o != nil && o.Version() != 0 {
		// RFC 6891 section 6.1.3: a version the responder does not
		// implement is answered BADVERS (the proxy speaks EDNS version 0).
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeBadVers)
		m.SetEdns0(upstreamUDPSize, false) // BADVERS is an extended rcode: it needs the OPT record
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	switch {
	case q.Qclass != dns.ClassINET:
		p.refuse(w, req, network, q.Name, q.Qtype, "class is not IN")
		return
	case !ValidName(q.Name):
		p.refuse(w, req, network, q.Name, q.Qtype, "malformed or over-long name")
		return
	case q.Qtype == dns.TypeANY || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR:
		p.refuse(w, req, network, q.Name, q.Qtype, "type "+dns.TypeToString[q.Qtype]+" is not answered")
		return
	}
	pattern, ok := Match(p.cfg.Hosts, q.Name)
	if !ok {
		p.refuse(w, req, network, q.Name, q.Qtype, "no NET intent declares this name")
		return
	}
	resp, err := p.forward(upstreamQuery(q.Name, q.Qtype, req.RecursionDesired))
	if err != nil {
		p.reply(w, req, network, dns.RcodeServerFailure)
		return
	}
	m, chain := rebuild(req, resp)
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	var local []netip.Addr
	kept := m.Answer[:0]
	var addrs []netip.Addr
	minTTL := chain
	for _, rr := range m.Answer {
		a, ok := address(rr)
		if !ok {
			kept = append(kept, rr)
			continue
		}
		if local == nil {
			local = append(HostAddrs(), p.local()...)
		}
		if why := Classify(a, p.cfg.Declared, local); why != "" {
			if p.cfg.OnRebinding != nil {
				p.cfg.OnRebinding(Rebinding{Name: name, Pattern: pattern, Qtype: q.Qtype, Addr: a.Unmap(), Why: why, Client: w.RemoteAddr(), Network: network})
			}
			continue
		}
		kept = append(kept, rr)
		addrs = append(addrs, a.Unmap())
		minTTL = min(minTTL, rr.Header().Ttl)
	}
	// Withheld addresses leave the answer without them: NOERROR with no
	// address (NODATA, RFC 2308 section 2.2), not NXDOMAIN, which would
	// say the name and every name under it does not exist (RFC 8020) and
	// hide the other family's addresses a later AAAA (or A) query may
	// still get. Without an SOA the client does not cache it (RFC 2308
	// section 5): it asks again.
	m.Answer = kept
	if len(addrs) > 0 && p.cfg.OnAnswer != nil {
		if err := p.cfg.OnAnswer(Answer{Name: name, Pattern: pattern, Qtype: q.Qtype, Addrs: addrs, TTL: time.Duration(minTTL) * time.Second}); err != nil {
			p.reply(w, req, network, dns.RcodeServerFailure)
			return
		}
	}
	p.write(w, req, network, m)
}

func (p *Proxy) local() []netip.Addr {
	if p.cfg.Local == nil {
		return nil
	}
	return p.cfg.Local()
}

// write sends m, the reply to req, within what the client can take: over
// UDP the payload size its EDNS0 OPT record advertised, 512 bytes without
// one (RFC 1035 section 4.2.1, RFC 6891 section 6.2.5), TC set when
// records had to go (the client asks again over TCP, RFC 7766); over TCP
// up to the 65535 bytes of the length prefix. A client that sent an OPT
// record gets one back (RFC 6891 section 7), the proxy's own.
func (p *Proxy) write(w dns.ResponseWriter, req *dns.Msg, network string, m *dns.Msg) {
	size := dns.MaxMsgSize
	if o := req.IsEdns0(); o != nil {
		m.SetEdns0(upstreamUDPSize, false)
		if network == "udp" {
			size = max(int(o.UDPSize()), dns.MinMsgSize)
		}
	} else if network == "udp" {
		size = dns.MinMsgSize
	}
	m.Truncate(size)
	_ = w.WriteMsg(m)
}

// upstreamQuery is the query the proxy sends upstream for the client's question: its
// own, so nothing of the client's message but the name and type reaches
// the upstream (an EDNS option, an additional or authority record, the
// letter case of the name are each a channel out): a fresh random id
// (RFC 5452), the name in lower case (RFC 4343 makes case meaningless to
// the answer), class IN, RD as asked, and the proxy's own EDNS0 OPT record
// (RFC 6891) with no options and the DO bit clear: the proxy does not
// validate DNSSEC and passes no signatures on.
func upstreamQuery(name string, qtype uint16, rd bool) *dns.Msg {
	m := new(dns.Msg)
	m.Id = dns.Id()
	m.Opcode = dns.OpcodeQuery
	m.RecursionDesired = rd
	m.Question = []dns.Question{{Name: strings.ToLower(dns.Fqdn(name)), Qtype: qtype, Qclass: dns.ClassINET}}
	m.SetEdns0(upstreamUDPSize, false)
	return m
}

// forward asks each upstream in turn, over UDP, again over TCP when the
// answer is truncated; the first NOERROR or NXDOMAIN answer to the
// question asked is the answer. Any other rcode (SERVFAIL, REFUSED, ...)
// moves on to the next upstream; from the last, it is SERVFAIL.
func (p *Proxy) forward(up *dns.Msg) (*dns.Msg, error) {
	var errs []error
	for _, u := range p.cfg.Upstreams {
		c := &dns.Client{Net: "udp", Timeout: p.cfg.Timeout}
		resp, _, err := c.Exchange(up, u)
		if err == nil && resp.Truncated {
			c.Net = "tcp"
			resp, _, err = c.Exchange(up, u)
		}
		switch {
		case err != nil:
		case !resp.Response || len(resp.Question) != 1 || !strings.EqualFold(resp.Question[0].Name, up.Question[0].Name) ||
			resp.Question[0].Qtype != up.Question[0].Qtype || resp.Question[0].Qclass != dns.ClassINET:
			err = fmt.Errorf("%s answered another question", u)
		case resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError:
			err = fmt.Errorf("%s answered %s", u, dns.RcodeToString[resp.Rcode])
		default:
			return resp, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// rebuild is the reply to req built from the upstream's answer resp: req's
// id and question as the client asked it (letter case included: a client
// using 0x20 bits checks them, draft-vixie-dnsext-dns0x20), the upstream's
// rcode, and of the answer section only the records of the question's
// chain: owned by the name asked or by a CNAME target reached from it, of
// the type asked or CNAME, each TTL capped at MaxTTL. Nothing of the
// authority or additional sections: a stub resolver needs no referral nor
// glue, and the SOA of a negative answer only tells how long to cache it
// (without it the client does not, RFC 2308 section 5). chain is the
// smallest TTL of the CNAMEs kept (MaxTTL without one).
func rebuild(req, resp *dns.Msg) (*dns.Msg, uint32) {
	q := req.Question[0]
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	m.Rcode = resp.Rcode
	asked := strings.ToLower(dns.Fqdn(q.Name))
	ceiling := uint32(MaxTTL / time.Second)
	minTTL := ceiling
	in := map[string]bool{asked: true}
	// CNAMEs may come in any order: follow until nothing new is reached
	// (bounded by the answer's size).
	for range len(resp.Answer) + 1 {
		grew := false
		for _, rr := range resp.Answer {
			if c, ok := rr.(*dns.CNAME); ok && c.Hdr.Class == dns.ClassINET && in[strings.ToLower(c.Hdr.Name)] && !in[strings.ToLower(c.Target)] {
				in[strings.ToLower(c.Target)] = true
				minTTL = min(minTTL, c.Hdr.Ttl)
				grew = true
			}
		}
		if !grew {
			break
		}
	}
	for _, rr := range resp.Answer {
		h := rr.Header()
		owner := strings.ToLower(h.Name)
		if !in[owner] || h.Class != dns.ClassINET || h.Rrtype != q.Qtype && h.Rrtype != dns.TypeCNAME {
			continue
		}
		rr = dns.Copy(rr)
		h = rr.Header()
		h.Name = owner
		if owner == asked {
			h.Name = dns.Fqdn(q.Name)
		}
		h.Ttl = min(h.Ttl, ceiling)
		if c, ok := rr.(*dns.CNAME); ok {
			c.Target = strings.ToLower(c.Target)
		}
		m.Answer = append(m.Answer, rr)
	}
	return m, minTTL
}

// address is the address an A or AAAA record holds.
func address(rr dns.RR) (netip.Addr, bool) {
	var ip net.IP
	switch r := rr.(type) {
	case *dns.A:
		ip = r.A
	case *dns.AAAA:
		ip = r.AAAA
	default:
		return netip.Addr{}, false
	}
	return netip.AddrFromSlice(ip)
}

// listenBoth listens on addr over UDP and TCP, on one port. With port 0
// the kernel picks the UDP port, which a TCP socket may hold already (an
// outgoing connection's local port): then another UDP port is tried.
func listenBoth(addr string) (net.PacketConn, net.Listener, error) {
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dnsproxy: %w", err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l, nil
		}
		pc.Close()
		if _, port, _ := net.SplitHostPort(addr); port != "0" || try == 20 || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, fmt.Errorf("dnsproxy: %w", err)
		}
	}
}
