//go:build linux

package netguard

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/klocklabs/klock/policy"
)

// TestCompileHostAddrs: a wildcard host has no rule until the session's
// DNS proxy answers it (no error: walled in, not open), and its answers
// become address rules on its ports; an exact name still must resolve.
func TestCompileHostAddrs(t *testing.T) {
	rs := ruleset(t, nil, "CONSUMES NET:*.cdn.test:443/tcp")
	pol, err := compile(rs)
	if err != nil || pol.N != 0 {
		t.Fatalf("unanswered wildcard: %d rules, %v; want none and no error", pol.N, err)
	}
	rs, err = rs.WithHostAddrs(map[string][]netip.Addr{"*.cdn.test": {netip.MustParseAddr("198.51.100.7")}})
	if err != nil {
		t.Fatal(err)
	}
	if pol, err = compile(rs); err != nil || pol.N != 1 || pol.Rules[0].PortLo != 443 || pol.Rules[0].Family != afInet {
		t.Fatalf("answered wildcard: %+v, %v", pol.Rules[:pol.N], err)
	}
	if _, err := compile(ruleset(t, nil, "CONSUMES NET:svc.test:443/tcp")); !errors.Is(err, ErrUnresolved) {
		t.Errorf("an unresolved exact name compiles: %v", err)
	}
	lease, err := policy.ParseIntent("CONSUMES NET:evil.test:53/udp")
	if err != nil {
		t.Fatal(err)
	}
	lease.Origin = "lease" // as decide amends
	if rs, err = rs.With(lease); err != nil {
		t.Fatal(err)
	}
	if _, err := compile(rs); err != nil {
		t.Errorf("a permissive lease on a refused name breaks the wall's updates: %v", err)
	}
}
