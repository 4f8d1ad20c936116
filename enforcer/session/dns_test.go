//go:build linux

package session

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/dnsproxy"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
	"github.com/miekg/dns"
)

func TestProxyAddrIsTheSessionsOwnLoopback(t *testing.T) {
	seen := map[netip.Addr]bool{}
	for n := range 16 {
		a := proxyAddr(fmt.Sprintf("20261125T163110-abc%d", n))
		b := a.As4()
		if b[0] != 127 || b[1] != 77 || b[3] == 0 || b[3] == 255 {
			t.Fatalf("%s is not 127.77.x.y with y in 1-254", a)
		}
		seen[a] = true
	}
	if len(seen) < 12 {
		t.Errorf("16 sessions get only %d addresses", len(seen))
	}
	if proxyAddr("a") != proxyAddr("a") || proxyAddr("a") == proxyAddr("b") {
		t.Error("the address is not a function of the session id")
	}
}

// TestAnswersOpenUntilTTLAndGrace: an answered address is allowed for the
// matched pattern's intent (its ports only) until TTL + DNSGrace, then
// gone; what Resolve found at start stays.
func TestAnswersOpenUntilTTLAndGrace(t *testing.T) {
	_, rs := compileFor(t, t.TempDir(), "CONSUMES NET:svc.test:443/tcp", "CONSUMES NET:*.cdn.test:80/tcp")
	rs, err := rs.Resolve(func(string) ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil })
	if err != nil {
		t.Fatal(err)
	}
	eng := decide.New(rs, policy.ModeStrict)
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	d := &dnsScope{stop: make(chan struct{}), ready: make(chan struct{}), live: map[string]map[netip.Addr]time.Time{},
		now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	d.attach(eng, &netWall{eng: eng})
	allows := func(addr string) bool {
		return eng.Ruleset().Allows(policy.Triple{Predicate: policy.Consumes, Type: policy.ObjNet, Addr: netip.MustParseAddrPort(addr), Proto: policy.ProtoTCP}).Allowed
	}
	if err := d.answered(dnsproxy.Answer{Name: "svc.test", Pattern: "svc.test", Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")}, TTL: 60 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := d.answered(dnsproxy.Answer{Name: "a.cdn.test", Pattern: "*.cdn.test", Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.2")}, TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if !allows("198.51.100.1:443") || allows("198.51.100.1:80") || !allows("198.51.100.2:80") || !allows("192.0.2.1:443") {
		t.Fatal("answers not allowed on their intents' ports")
	}
	expireAt := func(at time.Duration) {
		mu.Lock()
		now = time.Unix(1_800_000_000, 0).Add(at)
		mu.Unlock()
		go func() { time.Sleep(1500 * time.Millisecond); close(d.stop) }()
		d.expire()
		d.stop = make(chan struct{})
	}
	expireAt(5*time.Second + DNSGrace + time.Second)
	if !allows("198.51.100.1:443") || allows("198.51.100.2:80") {
		t.Error("after the CDN answer's TTL + grace: it stays, or svc.test's went")
	}
	expireAt(60*time.Second + DNSGrace + time.Second)
	if allows("198.51.100.1:443") || !allows("192.0.2.1:443") {
		t.Error("after svc.test's TTL + grace: its answer stays, or the start address went")
	}
}

// TestDNSRefusalsNameTheProxyAndTransport: a refused name is the
// triple CONSUMES NET:<name>:53 over the transport it came on; a withheld
// answer's address is the connection the name's intent would have made,
// the name and why in its syscall; both are the proxy's blocks.
func TestDNSRefusalsNameTheProxyAndTransport(t *testing.T) {
	_, rs := compileFor(t, t.TempDir(), "CONSUMES NET:*.example.test:8443/tcp", "CONSUMES NET:10.9.0.0/16:22/tcp")
	d := &dnsScope{refused: make(chan event.Event, 4), stop: make(chan struct{}), now: time.Now,
		peer: map[string]policy.NetPattern{}, declared: rs.DeclaredPrefixes()}
	for _, r := range rs.Net {
		if r.Pattern.Host != "" {
			d.peer[r.Pattern.Host] = r.Pattern
		}
	}
	if len(d.declared) != 1 || d.declared[0].String() != "10.9.0.0/16" {
		t.Fatalf("declared prefixes %v", d.declared)
	}
	d.refuse(dnsproxy.Refusal{Name: "evil.example", Qtype: dns.TypeA, Network: "tcp", Why: "no NET intent declares this name"})
	d.rebinding(dnsproxy.Rebinding{Name: "gw-10-203-75-25.example.test", Pattern: "*.example.test", Qtype: dns.TypeA,
		Addr: netip.MustParseAddr("10.203.75.25"), Why: "private address (RFC 1918)", Network: "udp"})
	ev := <-d.refused
	if ev.Triple.String() != "CONSUMES NET:evil.example:53/tcp" || ev.Source != event.SourceDNSProxy || !ev.Blocked {
		t.Errorf("refused name: %+v", ev)
	}
	ev = <-d.refused
	if ev.Triple.String() != "CONSUMES NET:10.203.75.25:8443/tcp" || ev.Source != event.SourceDNSProxy || !ev.Blocked ||
		!strings.Contains(ev.Syscall, "gw-10-203-75-25.example.test") || !strings.Contains(ev.Syscall, "RFC 1918") {
		t.Errorf("withheld address: %+v", ev)
	}
	if v := decide.New(rs, policy.ModeStrict).Observe(ev); !v.Violation() {
		t.Errorf("a withheld address is not a violation: %+v", v)
	}
}
