//go:build linux

package session

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/netwall"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// resolvedRules compiles a strict manifest with the given intents, every
// host name in it resolving to the addresses resolved.
func resolvedRules(t *testing.T, resolved []string, intents ...string) *policy.Ruleset {
	t.Helper()
	m, err := policy.Parse("m.yaml", []byte(testutil.ManifestYAML("coder", "strict", t.TempDir(), intents...)))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []netip.Addr
	for _, a := range resolved {
		addrs = append(addrs, netip.MustParseAddr(a))
	}
	rs, err = rs.Resolve(func(string) ([]netip.Addr, error) { return slices.Clone(addrs), nil })
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestPlanNet: the CONSUMES NET rules sort into the packet wall's peers
// (IPv4 and IPv6 addresses, host names), loopback relays (one loopback
// address), and what the session's namespace cannot reach (a loopback
// range);
// a host's addresses resolved at the start join its peer (loopback ones
// through a relay); binds are no peer, nor the session's DNS proxy
// (it listens in the namespace: no relay); NET:raw is the pings' peer.
func TestPlanNet(t *testing.T) {
	rs := resolvedRules(t, []string{"203.0.113.5", "127.0.0.9"},
		"CONSUMES NET:192.0.2.1:443/tcp", "CONSUMES NET:127.0.0.1:8080/tcp", "CONSUMES NET:127.0.0.0/8:80/tcp",
		"CONSUMES NET:[2001:db8::1]:443/tcp", "CONSUMES NET:api.example.com:443/tcp", "PROVIDES NET:127.0.0.1:9000/tcp",
		"CONSUMES NET:raw", "CONSUMES NET:192.0.2.1:443/tcp")
	proxy := netip.MustParseAddr("127.77.1.2")
	rs, err := rs.WithResolvers([]netip.Addr{proxy})
	if err != nil {
		t.Fatal(err)
	}
	p := planNet(rs, 1000, proxy)
	var wall []string
	for _, pe := range p.cfg.Peers {
		wall = append(wall, pe.Name)
	}
	if want := []string{"NET:192.0.2.1:443/tcp", "NET:[2001:db8::1]:443/tcp", "NET:api.example.com:443/tcp"}; !slices.Equal(wall, want) {
		t.Errorf("wall peers %v, want %v", wall, want)
	}
	if p.cfg.MaxEgressBytes != 1000 {
		t.Errorf("budget %d", p.cfg.MaxEgressBytes)
	}
	var relays []string
	for _, r := range p.relays {
		relays = append(relays, r.name+"@"+r.addr.String())
	}
	if want := []string{"NET:127.0.0.1:8080/tcp@127.0.0.1", "NET:api.example.com:443/tcp@127.0.0.9"}; !slices.Equal(relays, want) {
		t.Errorf("relays %v, want %v", relays, want)
	}
	if got := p.start["NET:api.example.com:443/tcp"]; len(got) != 1 || got[0] != netip.MustParseAddr("203.0.113.5") {
		t.Errorf("the host's start addresses on the wall: %v", got)
	}
	if hp := p.hosts["api.example.com"]; len(hp) != 1 || hp[0].name != "NET:api.example.com:443/tcp" {
		t.Errorf("host peers %+v", hp)
	}
	un := strings.Join(p.unreachable, "\n")
	if !strings.Contains(un, "127.0.0.0/8") || len(p.unreachable) != 1 {
		t.Errorf("unreachable:\n%s", un)
	}
	for _, pe := range p.peers {
		if strings.Contains(pe.name, "9000") || strings.Contains(pe.name, "127.77.1.2") {
			t.Errorf("%s is no peer (a bind, the DNS proxy in the namespace)", pe.name)
		}
	}
	// NET:raw: the pings' peer on the wall, and ping sockets.
	if !p.raw || p.cfg.PingPeer != rawPeer || !slices.Contains(p.peers, netPeer{rawPeer, viaWall}) {
		t.Errorf("NET:raw: raw %v, ping peer %q, peers %v", p.raw, p.cfg.PingPeer, p.peers)
	}
	if p.pingGID != 0 {
		t.Errorf("the plan names no group; prepare does")
	}
}

// TestNoIPv6SaysWhichPeers: on a host that gives the session no IPv6,
// each declared IPv6 peer (an address, a host's IPv6 start address, an
// AAAA answer) is named unreachable in the log, with the wall's reason
// and fix; IPv4 peers are not.
func TestNoIPv6SaysWhichPeers(t *testing.T) {
	rs := resolvedRules(t, []string{"203.0.113.5", "2001:db8::5"},
		"CONSUMES NET:192.0.2.1:443/tcp", "CONSUMES NET:[2001:db8::1]:443/tcp", "CONSUMES NET:api.example.com:443/tcp")
	why := fmt.Errorf("%w: IPv6 is disabled on this host (the fix: sysctl -w net.ipv6.conf.all.disable_ipv6=0)", netwall.ErrNoIPv6)
	n := &sessionNet{plan: planNet(rs, 0, netip.Addr{}), wall: &netwall.Wall{NoIPv6: why}, log: slog.New(slog.DiscardHandler)}
	n.checkIPv6()
	n.noIPv6Answer("NET:api.example.com:443/tcp", netip.MustParseAddr("2001:db8::6"))
	n.noIPv6Answer("NET:api.example.com:443/tcp", netip.MustParseAddr("2001:db8::7"))
	got := strings.Join(n.unrouted, "\n")
	for _, want := range []string{"NET:[2001:db8::1]:443/tcp: netwall: no IPv6: IPv6 is disabled", "NET:api.example.com:443/tcp: 2001:db8::5: ",
		"NET:api.example.com:443/tcp: the IPv6 answer 2001:db8::6"} {
		if !strings.Contains(got, want) {
			t.Errorf("unreachable peers:\n%s\nwant %q", got, want)
		}
	}
	if len(n.unrouted) != 3 || strings.Contains(got, "192.0.2.1") || !strings.Contains(got, "sysctl -w net.ipv6.conf.all.disable_ipv6=0") {
		t.Errorf("unreachable peers:\n%s", got)
	}
}

// TestRelayReportLetsGoAtClose: a relay's report waits while the
// session's queue is full (the agent's connect with it), and lets go once
// the session's network is closed, so that the relay's Close, which
// waits for its answers, never waits for a reader that is gone.
func TestRelayReportLetsGoAtClose(t *testing.T) {
	n := &sessionNet{relayed: make(chan event.Event, 1), stop: make(chan struct{}), log: slog.New(slog.DiscardHandler)}
	n.reportConnect(event.Event{Syscall: "connect"}) // queued
	done := make(chan struct{})
	go func() {
		n.reportConnect(event.Event{Syscall: "connect"}) // waits: the queue is full
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("a report went past a full queue")
	default:
	}
	n.close()
	n.close() // again: no second close of stop
	<-done
	if len(n.relayed) != 1 {
		t.Errorf("%d reports queued, want the first", len(n.relayed))
	}
}
