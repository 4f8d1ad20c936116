package dnsproxy

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// exchange sends m as it is to p over network.
func exchange(t *testing.T, p *Proxy, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 2 * time.Second, UDPSize: dns.MaxMsgSize}
	r, _, err := c.Exchange(m, p.Addr().String())
	if err != nil {
		t.Fatalf("%s over %s: %v", m.Question[0].Name, network, err)
	}
	return r
}

const secret = "s3cr3t-exfil-payload"

// leakyQuery is an A query for a declared name carrying a secret
// everywhere a message can besides the name: an EDNS option of its own,
// a cookie, padding, the DO bit, an additional and an authority record,
// the letter case of the name (0x20 bits).
func leakyQuery(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Id = 4242
	m.SetEdns0(4096, true)
	o := m.IsEdns0()
	o.Option = append(o.Option,
		&dns.EDNS0_LOCAL{Code: 65001, Data: []byte(secret)},
		&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"},
		&dns.EDNS0_PADDING{Padding: []byte(secret)})
	m.Extra = append(m.Extra, &dns.TXT{Hdr: dns.RR_Header{Name: "x.example.", Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 1}, Txt: []string{secret}})
	m.Ns = append(m.Ns, &dns.TXT{Hdr: dns.RR_Header{Name: "y.example.", Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 1}, Txt: []string{secret}})
	return m
}

// TestTheUpstreamHearsTheProxysOwnQuery: over UDP and TCP, a query for a
// declared name carrying data in EDNS options, additional and authority
// records and its letter case reaches the upstream as the proxy's own
// query: another id, the name in lower case, one question, the proxy's
// OPT record without options or DO, nothing else. The agent's reply keeps
// its id and question as asked, and holds only the question's chain: no
// other name's record, no authority or additional data of the upstream,
// TTLs capped at MaxTTL.
func TestTheUpstreamHearsTheProxysOwnQuery(t *testing.T) {
	u := startUpstream(t, "198.51.100.21")
	u.noisy, u.ttl = true, 86400
	u.answer("svc.test", "198.51.100.23")
	rec := &recorder{}
	p := startProxy(t, u, rec, "svc.test")
	for _, network := range []string{"udp", "tcp"} {
		before := len(u.messages())
		r := exchange(t, p, network, leakyQuery("SvC.TeSt."))
		got := u.messages()[before:]
		if len(got) != 1 {
			t.Fatalf("%s: the upstream received %d messages", network, len(got))
		}
		up := got[0].msg
		wire, err := up.Pack()
		if err != nil {
			t.Fatal(err)
		}
		o := up.IsEdns0()
		switch {
		case bytes.Contains(wire, []byte(secret)) || bytes.Contains(wire, []byte("0123456789abcdef")):
			t.Errorf("%s: the secret reached the upstream:\n%v", network, up)
		case len(up.Question) != 1 || up.Question[0].Name != "svc.test." || up.Question[0].Qtype != dns.TypeA || up.Question[0].Qclass != dns.ClassINET:
			t.Errorf("%s: the upstream was asked %v, want svc.test. IN A in lower case", network, up.Question)
		case up.Id == 4242:
			t.Errorf("%s: the upstream got the agent's id", network)
		case len(up.Ns) != 0 || len(up.Extra) != 1 || o == nil || len(o.Option) != 0 || o.Do() || o.UDPSize() != upstreamUDPSize:
			t.Errorf("%s: the upstream got authority %v, additional %v", network, up.Ns, up.Extra)
		case !up.RecursionDesired:
			t.Errorf("%s: RD was asked and not passed on", network)
		}
		if r.Id != 4242 || len(r.Question) != 1 || r.Question[0].Name != "SvC.TeSt." || r.Rcode != dns.RcodeSuccess {
			t.Errorf("%s: the agent's reply has id %d, question %v, rcode %s", network, r.Id, r.Question, dns.RcodeToString[r.Rcode])
		}
		var addrs []string
		for _, rr := range r.Answer {
			a, ok := rr.(*dns.A)
			if !ok || a.Hdr.Name != "SvC.TeSt." || a.Hdr.Ttl != uint32(MaxTTL/time.Second) {
				t.Errorf("%s: answer record %v: want only svc.test's A records, as asked, TTL %v", network, rr, MaxTTL)
				continue
			}
			addrs = append(addrs, a.A.String())
		}
		if strings.Join(addrs, " ") != "198.51.100.21 198.51.100.23" {
			t.Errorf("%s: the agent got %v", network, addrs)
		}
		if len(r.Ns) != 0 || len(r.Extra) != 1 || r.IsEdns0() == nil || len(r.IsEdns0().Option) != 0 {
			t.Errorf("%s: the agent got authority %v, additional %v", network, r.Ns, r.Extra)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.answers) != 2 || rec.answers[0].TTL != MaxTTL || len(rec.answers[0].Addrs) != 2 {
		t.Errorf("answers reported: %+v", rec.answers)
	}
}

// TestSizes: a query over 512 bytes is answered; an answer bigger than
// the upstream's UDP payload is fetched again over TCP; the agent gets it
// whole over UDP within the EDNS size it advertised, truncated (TC) to 512
// bytes without EDNS, and whole over TCP.
func TestSizes(t *testing.T) {
	u := startUpstream(t, "198.51.100.21")
	var big []string
	for i := range 100 {
		big = append(big, fmt.Sprintf("198.51.100.%d", i+1))
	}
	u.answer("big.test", big...)
	p := startProxy(t, u, &recorder{}, "big.test", "svc.test")

	// A query over 512 bytes (a long additional record), over UDP.
	m := leakyQuery("svc.test.")
	m.Extra[1].(*dns.TXT).Txt = []string{strings.Repeat("x", 250), strings.Repeat("y", 250), strings.Repeat("z", 250)}
	if wire, _ := m.Pack(); len(wire) <= 512 {
		t.Fatalf("the query is %d bytes", len(wire))
	}
	if r := exchange(t, p, "udp", m); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("a %s query over UDP: %v", "long", r)
	}

	edns := new(dns.Msg)
	edns.SetQuestion("big.test.", dns.TypeA)
	edns.SetEdns0(4096, false)
	before := len(u.messages())
	r := exchange(t, p, "udp", edns)
	if r.Truncated || len(r.Answer) != 100 {
		t.Errorf("over UDP with EDNS 4096: TC %v, %d records, want 100", r.Truncated, len(r.Answer))
	}
	var nets []string
	for _, x := range u.messages()[before:] {
		nets = append(nets, x.network)
	}
	if strings.Join(nets, " ") != "udp tcp" {
		t.Errorf("the upstream was asked over %v, want udp then tcp (its UDP answer is truncated)", nets)
	}

	plain := new(dns.Msg)
	plain.SetQuestion("big.test.", dns.TypeA)
	r = exchange(t, p, "udp", plain)
	r.Compress = true // as it came
	if wire, _ := r.Pack(); !r.Truncated || len(wire) > 512 || len(r.Answer) >= 100 {
		t.Errorf("over UDP without EDNS: TC %v, %d bytes, %d records; want TC within 512 bytes", r.Truncated, len(wire), len(r.Answer))
	}
	r = exchange(t, p, "tcp", plain)
	if r.Truncated || len(r.Answer) != 100 {
		t.Errorf("the retry over TCP: TC %v, %d records, want 100", r.Truncated, len(r.Answer))
	}
}

// TestTransportIsReported: a refusal and a withheld address say the
// transport the query came on.
func TestTransportIsReported(t *testing.T) {
	u := startUpstream(t, "10.0.0.1")
	rec := &recorder{}
	p := startProxy(t, u, rec, "svc.test")
	for _, network := range []string{"tcp", "udp"} {
		ask(t, p, network, "evil.example", dns.TypeA)
		ask(t, p, network, "svc.test", dns.TypeA)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.refusals) != 2 || rec.refusals[0].Network != "tcp" || rec.refusals[1].Network != "udp" {
		t.Errorf("refusals: %+v", rec.refusals)
	}
	if len(rec.rebinds) != 2 || rec.rebinds[0].Network != "tcp" || rec.rebinds[1].Network != "udp" {
		t.Errorf("rebindings: %+v", rec.rebinds)
	}
}

// TestRebindingIsWithheld: a declared name answered with an address of
// the host, its link or a private range is answered without it (NOERROR,
// no address when none is left), the address reported and never given to
// OnAnswer; a public address passes, and so does one in a declared prefix.
func TestRebindingIsWithheld(t *testing.T) {
	u := startUpstream(t, "198.51.100.21")
	rec := &recorder{}
	p := startProxyWith(t, u, rec, Config{Hosts: []string{"*.test"},
		Declared: []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("fd00:1::5/128")},
		Local:    func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("203.0.113.77")} }})
	type row struct {
		name  string
		addrs []string
		pass  []string // what the agent gets
	}
	rows := []row{
		{"lo.test", []string{"127.0.0.1"}, nil},
		{"ten.test", []string{"10.1.2.3"}, nil},
		{"home.test", []string{"192.168.1.1"}, nil},
		{"meta.test", []string{"169.254.169.254"}, nil},
		{"ll.test", []string{"fe80::1"}, nil},
		{"lo6.test", []string{"::1"}, nil},
		{"ula.test", []string{"fd00::1"}, nil},
		{"cgnat.test", []string{"100.64.0.1"}, nil},
		{"veth.test", []string{"203.0.113.77"}, nil},
		{"pub.test", []string{"93.184.216.34"}, []string{"93.184.216.34"}},
		{"mixed.test", []string{"10.0.0.1", "93.184.216.35"}, []string{"93.184.216.35"}},
		{"decl.test", []string{"172.16.5.5"}, []string{"172.16.5.5"}},
		{"decl6.test", []string{"fd00:1::5", "fd00:1::6"}, []string{"fd00:1::5"}},
	}
	// One of the host's own addresses, whatever its range.
	for _, a := range HostAddrs() {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() && a.Is4() {
			rows = append(rows, row{"self.test", []string{a.String()}, nil})
			break
		}
	}
	refused := 0
	for _, r := range rows {
		u.answer(r.name, r.addrs...)
		qtype := dns.TypeA
		if strings.Contains(r.addrs[0], ":") {
			qtype = dns.TypeAAAA
		}
		m := ask(t, p, "udp", r.name, qtype)
		var got []string
		for _, rr := range m.Answer {
			a, _ := address(rr)
			got = append(got, a.String())
		}
		if m.Rcode != dns.RcodeSuccess || strings.Join(got, " ") != strings.Join(r.pass, " ") {
			t.Errorf("%s answered %v: the agent got %s %v, want NOERROR %v", r.name, r.addrs, dns.RcodeToString[m.Rcode], got, r.pass)
		}
		refused += len(r.addrs) - len(r.pass)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.rebinds) != refused {
		t.Errorf("%d rebindings reported, want %d: %+v", len(rec.rebinds), refused, rec.rebinds)
	}
	for _, rb := range rec.rebinds {
		if rb.Why == "" || rb.Pattern != "*.test" || !strings.HasSuffix(rb.Name, ".test") || !rb.Addr.IsValid() {
			t.Errorf("rebinding reported as %+v", rb)
		}
		if rb.Name == "meta.test" && !strings.Contains(rb.Why, "metadata") {
			t.Errorf("169.254.169.254: %q", rb.Why)
		}
	}
	var opened []string
	for _, a := range rec.answers {
		for _, ip := range a.Addrs {
			opened = append(opened, a.Name+"="+ip.String())
		}
	}
	if want := "pub.test=93.184.216.34 mixed.test=93.184.216.35 decl.test=172.16.5.5 decl6.test=fd00:1::5"; strings.Join(opened, " ") != want {
		t.Errorf("OnAnswer was told %v, want %s", opened, want)
	}
}

func TestClassify(t *testing.T) {
	declared := []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix("127.0.0.31/32"),
		netip.MustParsePrefix("fd00:ab::/32"), netip.MustParsePrefix("::ffff:192.168.7.0/120")}
	local := []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")}
	for _, tc := range []struct {
		addr string
		want string // a word of the reason, "" when it passes
	}{
		{"93.184.216.34", ""},
		{"8.8.8.8", ""},
		{"127.0.0.1", "loopback"},
		{"127.77.1.2", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "this network"},
		{"10.0.0.1", "RFC 1918"},
		{"172.16.0.1", "RFC 1918"},
		{"172.32.0.1", ""},
		{"192.168.1.1", "RFC 1918"},
		{"100.64.0.1", "RFC 6598"},
		{"100.127.255.255", "RFC 6598"},
		{"100.128.0.1", ""},
		{"198.18.0.1", "RFC 2544"},
		{"198.19.255.254", "RFC 2544"},
		{"169.254.169.254", "metadata"},
		{"169.254.1.1", "link-local"},
		{"224.0.0.1", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"198.51.100.7", "this host"},
		{"10.9.1.1", ""},   // declared prefix
		{"127.0.0.31", ""}, // declared address
		{"127.0.0.32", "loopback"},
		{"192.168.7.9", ""}, // declared as a v4-mapped prefix
		{"2606:2800:220:1:248:1893:25c8:1946", ""},
		{"::1", "loopback"},
		{"::", "unspecified"},
		{"fe80::1", "link-local"},
		{"ff02::1", "multicast"},
		{"fd00::1", "RFC 4193"},
		{"fc00::1", "RFC 4193"},
		{"fd00:ec2::254", "metadata"},
		{"fec0::1", "site-local"},
		{"fd00:ab::1", ""}, // declared
		{"2001:db8::7", "this host"},
		{"64:ff9b::a00:1", "NAT64"},
		{"64:ff9b::5db8:d822", ""},
		{"64:ff9b:1::5db8:d822", "RFC 8215"},
		{"2002:a00:1::1", "6to4 of a private"},
		{"2002:7f00:1::1", "6to4 of a loopback"},
		{"2002:5db8:d822::1", ""},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.1.1.1", "RFC 1918"},
		{"::ffff:169.254.169.254", "metadata"},
		{"::ffff:93.184.216.34", ""},
		{"::ffff:10.9.0.1", ""}, // declared as IPv4
		{"::ffff:198.51.100.7", "this host"},
	} {
		got := Classify(netip.MustParseAddr(tc.addr), declared, local)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("Classify(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestUpstreamFailures: an upstream that answers REFUSED or another
// question is skipped for the next; with none left, SERVFAIL.
func TestUpstreamFailures(t *testing.T) {
	good := startUpstream(t, "198.51.100.21")
	bad := func(rcode int, name string) string {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			m := new(dns.Msg)
			m.SetRcode(req, rcode)
			if name != "" {
				m.Question[0].Name = name
			}
			_ = w.WriteMsg(m)
		})}
		go func() { _ = s.ActivateAndServe() }()
		t.Cleanup(func() { _ = s.Shutdown() })
		return pc.LocalAddr().String()
	}
	refused, other := bad(dns.RcodeRefused, ""), bad(dns.RcodeSuccess, "evil.example.")
	p, err := Start(Config{Addr: "127.0.0.1:0", Upstreams: []string{refused, other, good.at}, Hosts: []string{"svc.test"}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := firstA(t, ask(t, p, "udp", "svc.test", dns.TypeA)); got != "198.51.100.21" {
		t.Errorf("got %s", got)
	}
	q, err := Start(Config{Addr: "127.0.0.1:0", Upstreams: []string{refused, other}, Hosts: []string{"svc.test"}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if r := ask(t, q, "udp", "svc.test", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("no good upstream: %s", dns.RcodeToString[r.Rcode])
	}
}

func TestNonPublic(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   bool
	}{
		{"10.0.0.0/8", true}, {"10.1.2.3/32", true}, {"127.0.0.31/32", true}, {"0.0.0.0/0", true},
		{"96.0.0.0/3", true}, // holds 100.64.0.0/10
		{"93.184.216.0/24", false}, {"8.8.8.8/32", false}, {"169.254.169.254/32", true},
		{"fd00::/8", true}, {"2001:db8::/32", false}, {"::/0", true}, {"::ffff:10.0.0.0/104", true},
		{"::ffff:93.184.216.34/128", false},
		{"2002::/16", true}, {"2002:5db8:d822::/48", false}, {"64:ff9b:1::/48", true},
	} {
		if got := NonPublic(netip.MustParsePrefix(tc.prefix)); got != tc.want {
			t.Errorf("NonPublic(%s) = %v, want %v", tc.prefix, got, tc.want)
		}
	}
}
