package e2e

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/klocklabs/klock/enforcer/netwall"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/harness"
)

// msgDNS is a name server the test runs: it answers an A query with what
// answer says for the name, and keeps every message it received.
type msgDNS struct {
	mu     sync.Mutex
	answer func(name string) []netip.Addr
	msgs   []*dns.Msg
	addr   string
}

func startMsgDNS(t *testing.T, answer func(name string) []netip.Addr) *msgDNS {
	t.Helper()
	d := &msgDNS{answer: answer}
	pc, ln := testutil.UDPAndTCP(t, "127.0.0.1")
	d.addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(d.serve)
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h, UDPSize: dns.MaxMsgSize}, {Listener: ln, Handler: h}} {
		go func() { _ = s.ActivateAndServe() }()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return d
}

func (d *msgDNS) serve(w dns.ResponseWriter, req *dns.Msg) {
	d.mu.Lock()
	d.msgs = append(d.msgs, req.Copy())
	d.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(req)
	// IPv4 addresses are A answers, IPv6 ones AAAA answers.
	if q := req.Question[0]; q.Qtype == dns.TypeA || q.Qtype == dns.TypeAAAA {
		for _, a := range d.answer(strings.ToLower(strings.TrimSuffix(q.Name, "."))) {
			hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 60}
			switch {
			case a.Is4() && q.Qtype == dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			case a.Is6() && q.Qtype == dns.TypeAAAA:
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
	}
	_ = w.WriteMsg(m)
}

func (d *msgDNS) received() []*dns.Msg {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*dns.Msg(nil), d.msgs...)
}

// gateway is the host side address of session id's veth pair (its
// namespace's gateway), once the session made it.
func gateway(id string) (netip.Addr, bool) {
	ifi, err := net.InterfaceByName("kl-" + netwall.ShortID(id))
	if err != nil {
		return netip.Addr{}, false
	}
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() {
				return ip.Unmap(), true
			}
		}
	}
	return netip.Addr{}, false
}

// TestDNSRebindingIsRefused: a strict agent that declared
// *.rebind.test:PORT/tcp looks up a name under it that its resolver
// answers with the session's gateway (the host's side of its veth pair)
// or with loopback: the answer reaches the agent without the address,
// nothing connects to the host's service there, and the withheld address
// is the DNS proxy's refusal in the log (CONSUMES NET:<addr>:PORT/tcp),
// which kills the session. When the manifest declares the address (or a
// prefix holding it), the answer is given and the agent connects.
func TestDNSRebindingIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		to       string // "gateway" or an address
		declared string // an extra intent declaring the address, or ""
	}{
		{"gateway", "gateway", ""},
		{"loopback", "127.0.0.1", ""},
		{"gateway declared", "gateway", "CONSUMES NET:" + netwall.Range.String() + ":9/tcp"},
		{"loopback declared", "127.0.0.1", "CONSUMES NET:127.0.0.1:9/tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := harness.NewWorld(t)
			svc := listenAt(t, "0.0.0.0", 0) // every host address, the gateway's too
			port := strconv.Itoa(svc.port)
			id := harness.NewID()
			var gw netip.Addr
			d := startMsgDNS(t, func(string) []netip.Addr {
				if tc.to != "gateway" {
					return []netip.Addr{netip.MustParseAddr(tc.to)}
				}
				a, ok := gateway(id)
				if !ok {
					t.Errorf("no link kl-%s on the host", netwall.ShortID(id))
					return nil
				}
				gw = a
				return []netip.Addr{a}
			})
			intents := append(harness.ProbeIntents(), "CONSUMES NET:*.rebind.test:"+port+"/tcp")
			if tc.declared != "" {
				intents = append(intents, tc.declared)
			}
			step := "resolve-dial:host-" + strings.ReplaceAll(tc.name, " ", "-") + ".rebind.test>" + port
			o := w.Run(harness.Spec{ID: id, Intents: intents, Command: []string{harness.Probe, step},
				Env: []string{"GODEBUG=netdns=go"}, DNSUpstreams: []string{d.addr},
				Resolve: func(context.Context, string) ([]netip.Addr, error) { return nil, nil }})
			if len(d.received()) == 0 {
				t.Fatalf("the test's DNS server was never asked\n%s", o.Dump())
			}
			addr := tc.to
			if tc.to == "gateway" {
				addr = gw.String()
			}
			tr := "CONSUMES NET:" + addr + ":" + port + "/tcp"
			if tc.declared != "" {
				if o.Probe[step] != "ok" || !svc.accepted() {
					t.Errorf("a declared %s: probe %q\n%s", addr, o.Probe[step], o.Dump())
				}
				if v := o.Violation(tr); v != nil {
					t.Errorf("a declared address refused: %+v", v)
				}
				return
			}
			if o.Probe[step] == "ok" || svc.accepted() {
				t.Errorf("%s reached: probe %q\n%s", addr, o.Probe[step], o.Dump())
			}
			v := o.Violation(tr)
			if v == nil || !v.Blocked || !v.ByDNSProxy() || !strings.Contains(v.Syscall, "rebind.test") || !strings.Contains(v.Syscall, "withheld") {
				t.Errorf("no DNS proxy refusal %s naming the name: %+v\n%s", tr, v, o.Dump())
			}
			if !o.Res.Killed {
				t.Errorf("strict session not killed for %s\n%s", tr, o.Dump())
			}
		})
	}
}

// TestDNSQueryCarriesOnlyTheName: the agent sends the session's DNS
// proxy, over UDP and over TCP, a query for a declared name carrying a
// secret in an EDNS option, an additional and an authority record, and
// its name in mixed case: the upstream receives the proxy's own queries
// (the name in lower case, another id, no option, no other record) and the
// agent gets answers to its own (its id, its question as asked).
func TestDNSQueryCarriesOnlyTheName(t *testing.T) {
	w := harness.NewWorld(t)
	d := startMsgDNS(t, func(string) []netip.Addr { return []netip.Addr{netip.MustParseAddr("93.184.216.34")} })
	step := "dnsleak:svc.leak.test"
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:svc.leak.test:443/tcp"),
		Command: []string{harness.Probe, step}, DNSUpstreams: []string{d.addr}, Resolve: startResolve})
	if o.Probe[step] != "ok" {
		t.Errorf("the agent's queries: %q\n%s", o.Probe[step], o.Dump())
	}
	got := d.received()
	if len(got) < 2 {
		t.Fatalf("the test's DNS server received %d queries, want the UDP and the TCP one\n%s", len(got), o.Dump())
	}
	for _, m := range got {
		wire, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		o := m.IsEdns0()
		if bytes.Contains(wire, []byte(harness.DNSSecret)) || bytes.Contains(wire, []byte("0123456789abcdef")) ||
			len(m.Question) != 1 || m.Question[0].Name != "svc.leak.test." || len(m.Ns) != 0 || len(m.Extra) != 1 ||
			o == nil || len(o.Option) != 0 || o.Do() {
			t.Errorf("the upstream received more than the name:\n%v", m)
		}
	}
	if o.Res.Killed || len(o.Log.Violations) != 0 {
		t.Errorf("a declared name's queries are violations\n%s", o.Dump())
	}
}
