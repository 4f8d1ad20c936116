package dnsproxy

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/miekg/dns"
)

// upstream is a name server the test runs: it answers svc.test (and
// alias.test, a CNAME to svc.test) with addr, the names of zone with
// theirs, and records every query and every message it received.
type upstream struct {
	mu       sync.Mutex
	addr     string // what svc.test answers
	zone     map[string][]string
	ttl      uint32 // of the zone's records (60 unless set)
	noisy    bool   // add records of other names, authority and additional data
	queries  []string
	received []received
	srv      []*dns.Server
	at       string
}

// received is one message as the upstream read it.
type received struct {
	network string
	msg     *dns.Msg
}

func startUpstream(t *testing.T, answer string) *upstream {
	t.Helper()
	u := &upstream{addr: answer, zone: map[string][]string{}}
	pc, l := testutil.UDPAndTCP(t, "127.0.0.1")
	u.at = pc.LocalAddr().String()
	u.srv = []*dns.Server{
		{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { u.serve(w, r, "udp") }), UDPSize: dns.MaxMsgSize},
		{Listener: l, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { u.serve(w, r, "tcp") })},
	}
	for _, s := range u.srv {
		go func() { _ = s.ActivateAndServe() }()
	}
	t.Cleanup(func() {
		for _, s := range u.srv {
			_ = s.Shutdown()
		}
	})
	return u
}

func (u *upstream) set(addr string) { u.mu.Lock(); u.addr = addr; u.mu.Unlock() }

// answer makes name (lower case, no trailing dot) answer addrs.
func (u *upstream) answer(name string, addrs ...string) {
	u.mu.Lock()
	u.zone[name+"."] = addrs
	u.mu.Unlock()
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.queries...)
}

func (u *upstream) messages() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]received(nil), u.received...)
}

func (u *upstream) serve(w dns.ResponseWriter, req *dns.Msg, network string) {
	u.mu.Lock()
	q := req.Question[0]
	u.queries = append(u.queries, q.Name)
	u.received = append(u.received, received{network, req.Copy()})
	addr := u.addr
	zone := u.zone[strings.ToLower(q.Name)]
	ttl, noisy := u.ttl, u.noisy
	u.mu.Unlock()
	if ttl == 0 {
		ttl = 60
	}
	m := new(dns.Msg)
	m.SetReply(req)
	name := strings.ToLower(q.Name)
	if name == "alias.test." {
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 30}, Target: "svc.test."})
		name = "svc.test."
	}
	if (name == "svc.test." || strings.HasSuffix(name, ".wild.test.")) && q.Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.ParseIP(addr)})
	}
	for _, a := range zone {
		ip := netip.MustParseAddr(a)
		switch {
		case ip.Is4() && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: ip.AsSlice()})
		case ip.Is6() && q.Qtype == dns.TypeAAAA:
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: ip.AsSlice()})
		}
	}
	if noisy {
		// What a resolver (or the zone of whoever answers) may add: an
		// address for another name, a TXT of the name asked, a
		// delegation and its glue.
		m.Answer = append(m.Answer,
			&dns.A{Hdr: dns.RR_Header{Name: "other.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP("203.0.113.9")},
			&dns.TXT{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{"inbound"}})
		m.Ns = append(m.Ns, &dns.NS{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: 60}, Ns: "ns.other.test."})
		m.Extra = append(m.Extra, &dns.A{Hdr: dns.RR_Header{Name: "ns.other.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP("203.0.113.10")})
	}
	if network == "udp" {
		// As a name server does: within the client's size, TC when cut.
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = int(o.UDPSize())
			m.SetEdns0(o.UDPSize(), false)
		}
		m.Truncate(size)
	}
	_ = w.WriteMsg(m)
}

type recorder struct {
	mu       sync.Mutex
	answers  []Answer
	refusals []Refusal
	rebinds  []Rebinding
}

func startProxy(t *testing.T, u *upstream, rec *recorder, hosts ...string) *Proxy {
	t.Helper()
	return startProxyWith(t, u, rec, Config{Hosts: hosts})
}

// startProxyWith starts a proxy of cfg (its address, upstream, timeout
// and callbacks filled in) reporting to rec.
func startProxyWith(t *testing.T, u *upstream, rec *recorder, cfg Config) *Proxy {
	t.Helper()
	cfg.Addr, cfg.Upstreams, cfg.Timeout = "127.0.0.1:0", []string{u.at}, time.Second
	cfg.OnAnswer = func(a Answer) error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.answers = append(rec.answers, a)
		return nil
	}
	cfg.OnRefused = func(r Refusal) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.refusals = append(rec.refusals, r)
	}
	cfg.OnRebinding = func(r Rebinding) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.rebinds = append(rec.rebinds, r)
	}
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func ask(t *testing.T, p *Proxy, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, p.Addr().String())
	if err != nil {
		t.Fatalf("ask %s %s over %s: %v", name, dns.TypeToString[qtype], network, err)
	}
	return r
}

func firstA(t *testing.T, r *dns.Msg) string {
	t.Helper()
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String()
		}
	}
	t.Fatalf("no A record in %v", r)
	return ""
}

// TestDeclaredNameFollowsTheUpstream: a declared name is answered with
// what the upstream says now, and each answer's addresses are reported
// with the pattern and TTL, over UDP and TCP; a CNAME to it is followed.
func TestDeclaredNameFollowsTheUpstream(t *testing.T) {
	u := startUpstream(t, "198.51.100.21")
	rec := &recorder{}
	p := startProxy(t, u, rec, "svc.test", "alias.test", "*.wild.test")
	if got := firstA(t, ask(t, p, "udp", "SVC.test", dns.TypeA)); got != "198.51.100.21" {
		t.Fatalf("first answer %s, want 198.51.100.21", got)
	}
	u.set("198.51.100.22")
	if got := firstA(t, ask(t, p, "tcp", "svc.test", dns.TypeA)); got != "198.51.100.22" {
		t.Fatalf("answer after the change %s, want 198.51.100.22", got)
	}
	ask(t, p, "udp", "alias.test", dns.TypeA)
	ask(t, p, "udp", "a.b.wild.test", dns.TypeA)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []struct {
		name, pattern, addr string
		ttl                 time.Duration
	}{
		{"svc.test", "svc.test", "198.51.100.21", 60 * time.Second},
		{"svc.test", "svc.test", "198.51.100.22", 60 * time.Second},
		{"alias.test", "alias.test", "198.51.100.22", 30 * time.Second},
		{"a.b.wild.test", "*.wild.test", "198.51.100.22", 60 * time.Second},
	}
	if len(rec.answers) != len(want) {
		t.Fatalf("answers reported: %+v", rec.answers)
	}
	for i, w := range want {
		a := rec.answers[i]
		if a.Name != w.name || a.Pattern != w.pattern || len(a.Addrs) != 1 || a.Addrs[0] != netip.MustParseAddr(w.addr) || a.TTL != w.ttl {
			t.Errorf("answer %d = %+v, want %+v", i, a, w)
		}
	}
	if len(rec.refusals) != 0 {
		t.Errorf("refusals: %+v", rec.refusals)
	}
}

// TestUndeclaredNameIsRefusedAndNotForwarded: REFUSED, reported, and the
// upstream hears nothing; so for ANY, malformed and over-long names.
func TestUndeclaredNameIsRefusedAndNotForwarded(t *testing.T) {
	u := startUpstream(t, "198.51.100.21")
	rec := &recorder{}
	p := startProxy(t, u, rec, "svc.test", "*.wild.test")
	for _, tc := range []struct {
		network, name string
		qtype         uint16
	}{
		{"udp", "evil.example", dns.TypeA},
		{"tcp", "evil.example", dns.TypeAAAA},
		{"udp", "svc.test", dns.TypeANY},
		{"udp", "x.svc.test", dns.TypeA},
		{"udp", "wild.test", dns.TypeA},
		{"udp", `a\000b.wild.test`, dns.TypeA},
	} {
		if r := ask(t, p, tc.network, tc.name, tc.qtype); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Errorf("%s %s over %s: rcode %s, %d answers; want REFUSED", tc.name, dns.TypeToString[tc.qtype], tc.network, dns.RcodeToString[r.Rcode], len(r.Answer))
		}
	}
	if q := u.seen(); len(q) != 0 {
		t.Errorf("the upstream received %v", q)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.refusals) != 6 || rec.refusals[0].Name != "evil.example" || rec.refusals[0].Qtype != dns.TypeA || rec.refusals[0].Client == nil {
		t.Errorf("refusals reported: %+v", rec.refusals)
	}
}

// TestTXTBurstForAnUndeclaredDomain: 200 TXT queries for random
// subdomains of an undeclared domain (DNS exfiltration): none reaches
// the upstream.
func TestTXTBurstForAnUndeclaredDomain(t *testing.T) {
	u := startUpstream(t, "198.51.100.21")
	rec := &recorder{}
	p := startProxy(t, u, rec, "svc.test")
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	for i := range 200 {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("%016x.%d.attacker.example.", rand.Uint64(), i), dns.TypeTXT)
		r, _, err := c.Exchange(m, p.Addr().String())
		if err != nil || r.Rcode != dns.RcodeRefused {
			t.Fatalf("query %d: %v %v", i, r, err)
		}
	}
	if q := u.seen(); len(q) != 0 {
		t.Errorf("the upstream received %d queries: %v", len(q), q[:min(5, len(q))])
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.refusals) != 200 {
		t.Errorf("%d refusals reported, want 200", len(rec.refusals))
	}
}

// TestAnswerErrorIsServfail: an address the caller could not open its
// wall to is never told to the client.
func TestAnswerErrorIsServfail(t *testing.T) {
	u := startUpstream(t, "198.51.100.21")
	p, err := Start(Config{Addr: "127.0.0.1:0", Upstreams: []string{u.at}, Hosts: []string{"svc.test"},
		OnAnswer: func(Answer) error { return fmt.Errorf("wall full") }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if r := ask(t, p, "udp", "svc.test", dns.TypeA); r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
		t.Errorf("rcode %s with %d answers, want SERVFAIL and none", dns.RcodeToString[r.Rcode], len(r.Answer))
	}
}

// TestAddressInUse: a taken address is an error, nothing left bound.
func TestAddressInUse(t *testing.T) {
	u := startUpstream(t, "198.51.100.21")
	p := startProxy(t, u, &recorder{}, "svc.test")
	_, err := Start(Config{Addr: p.Addr().String(), Upstreams: []string{u.at}})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("second Start on %s: %v", p.Addr(), err)
	}
}

func TestMatch(t *testing.T) {
	pats := []string{"svc.test", "*.Example.com"}
	for _, tc := range []struct {
		name, want string
	}{
		{"svc.test", "svc.test"}, {"SVC.TEST.", "svc.test"}, {"a.svc.test", ""},
		{"a.example.com", "*.Example.com"}, {"a.b.example.com.", "*.Example.com"},
		{"example.com", ""}, {"aexample.com", ""}, {".example.com", ""}, {"a..example.com", ""},
		{"a b.example.com", ""}, {"", ""},
		{strings.Repeat("a.", 124) + "example.com", ""}, {strings.Repeat("a", 64) + ".example.com", ""},
		{strings.Repeat("a.", 120) + "example.com", "*.Example.com"},
	} {
		got, ok := Match(pats, tc.name)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("Match(%q) = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}

// FuzzMatch: a name matched is valid and is the pattern or ends in its
// suffix after a label boundary.
func FuzzMatch(f *testing.F) {
	for _, s := range []string{"svc.test", "a.example.com", "example.com", "x..example.com", "A.EXAMPLE.COM.", "evil.example"} {
		f.Add(s)
	}
	pats := []string{"svc.test", "*.example.com"}
	f.Fuzz(func(t *testing.T, name string) {
		p, ok := Match(pats, name)
		if !ok {
			return
		}
		n := strings.ToLower(strings.TrimSuffix(name, "."))
		if !ValidName(name) {
			t.Fatalf("%q matched %q but is not valid", name, p)
		}
		switch p {
		case "svc.test":
			if n != "svc.test" {
				t.Fatalf("%q matched %q", name, p)
			}
		case "*.example.com":
			head, ok := strings.CutSuffix(n, ".example.com")
			if !ok || head == "" || strings.HasPrefix(head, ".") || strings.HasSuffix(head, ".") || strings.Contains(head, "..") {
				t.Fatalf("%q matched %q", name, p)
			}
		default:
			t.Fatalf("%q matched unknown %q", name, p)
		}
	})
}
