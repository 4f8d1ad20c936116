package decide

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy"
)

// TestLearnedNamesTheHostsTheAgentLookedUp: the kernel reports addresses;
// the learned manifest declares the names the agent looked up (a DNS
// answer, or the hosts file it read) wherever an address it connected to
// was one of their answers, and the address only where no name answered
// it. The DNS traffic to the name server is implied by a declared name.
// In strict mode, the name resolving to another address at the next
// session's start (a CDN) still lets the agent through.
func TestLearnedNamesTheHostsTheAgentLookedUp(t *testing.T) {
	ns := netip.MustParseAddr("10.0.0.53")
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()), WithNameServers([]netip.Addr{ns}))
	e.Observe(netEv("10.0.0.53:53", policy.ProtoUDP))
	e.Lookup("Registry.Example.org.", []netip.Addr{netip.MustParseAddr("203.0.113.80"), netip.MustParseAddr("203.0.113.81")}, FromDNS)
	e.Observe(netEv("203.0.113.80:443", policy.ProtoTCP))
	e.Observe(netEv("198.51.100.9:22", policy.ProtoTCP))
	e.Observe(fileEv(policy.Consumes, "/etc/hosts", "openat"))
	e.Lookup("db.internal", []netip.Addr{netip.MustParseAddr("10.1.2.3")}, FromHosts)
	e.Lookup("localhost", []netip.Addr{netip.MustParseAddr("127.0.0.1")}, FromHosts)
	e.Observe(netEv("10.1.2.3:5432", policy.ProtoTCP))
	e.Observe(netEv("127.0.0.1:8080", policy.ProtoTCP))
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{
		"CONSUMES NET:registry.example.org:443/tcp # learned: looked up by the agent",
		"CONSUMES NET:db.internal:5432/tcp # learned: looked up by the agent",
		"CONSUMES NET:198.51.100.9:22/tcp #",
		"CONSUMES NET:127.0.0.1:8080/tcp #",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("learned manifest lacks %q\n%s", want, s)
		}
	}
	for _, unwanted := range []string{"- CONSUMES NET:203.0.113.80", "- CONSUMES NET:10.0.0.53", "- CONSUMES NET:10.1.2.3", "localhost"} {
		if strings.Contains(s, unwanted) {
			t.Errorf("learned manifest has %q\n%s", unwanted, s)
		}
	}
	lm, err := policy.Parse("learned.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := compile(t, lm).Resolve(func(h string) ([]netip.Addr, error) {
		return map[string][]netip.Addr{
			"registry.example.org": {netip.MustParseAddr("203.0.113.99")},
			"db.internal":          {netip.MustParseAddr("10.1.2.3")},
		}[h], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rs, err = rs.WithResolvers([]netip.Addr{ns}); err != nil {
		t.Fatal(err)
	}
	strict := New(rs, policy.ModeStrict)
	for _, v := range observeAll(strict, netEv("10.0.0.53:53", policy.ProtoUDP), netEv("203.0.113.99:443", policy.ProtoTCP), netEv("10.1.2.3:5432", policy.ProtoTCP)) {
		if v.Action != ActionAllow {
			t.Errorf("the next run: %s → %v (%v)", v.Triple, v.Action, v.Err)
		}
	}
}

// TestLearnedKeepsAddressesWithoutLookups: without a name lookup, the
// address is learned, the name server's included (the agent asked it for
// something that answered nothing it connected to).
func TestLearnedKeepsAddressesWithoutLookups(t *testing.T) {
	ns := netip.MustParseAddr("10.0.0.53")
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()), WithNameServers([]netip.Addr{ns}))
	e.Observe(netEv("10.0.0.53:53", policy.ProtoUDP))
	e.Observe(netEv("203.0.113.80:443", policy.ProtoTCP))
	// The hosts file's answer counts only when the agent read it.
	e.Lookup("db.internal", []netip.Addr{netip.MustParseAddr("203.0.113.80")}, FromHosts)
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	for _, want := range []string{"CONSUMES NET:10.0.0.53:53/udp #", "CONSUMES NET:203.0.113.80:443/tcp #"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("learned manifest lacks %q\n%s", want, out)
		}
	}
}
