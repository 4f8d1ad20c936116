//go:build linux

package session

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// TestPlanNet: the CONSUMES NET rules sort into the packet wall's peers
// (IPv4 and IPv6 addresses, host names), loopback relays (one loopback
// address), and what the session's namespace cannot reach (a loopback
// range);
// a host's addresses resolved at the start join its peer (loopback ones
// through a relay); binds are no peer, nor the session's DNS proxy
// (it listens in the namespace: no relay); NET:raw is the pings' peer.
func TestPlanNet(t *testing.T) {
	m, err := policy.Parse("m.yaml", []byte(testutil.ManifestYAML("coder", "strict", t.TempDir(),
		"CONSUMES NET:192.0.2.1:443/tcp", "CONSUMES NET:127.0.0.1:8080/tcp", "CONSUMES NET:127.0.0.0/8:80/tcp",
		"CONSUMES NET:[2001:db8::1]:443/tcp", "CONSUMES NET:api.example.com:443/tcp", "PROVIDES NET:127.0.0.1:9000/tcp",
		"CONSUMES NET:raw", "CONSUMES NET:192.0.2.1:443/tcp")))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	rs, err = rs.Resolve(func(string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("127.0.0.9")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	proxy := netip.MustParseAddr("127.77.1.2")
	rs, err = rs.WithResolvers([]netip.Addr{proxy})
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
