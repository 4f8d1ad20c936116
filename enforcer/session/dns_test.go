//go:build linux

package session

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/dnsproxy"
	"github.com/klocklabs/klock/policy"
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
