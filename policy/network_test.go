package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestNetworkBudget: network.max_egress_bytes is a positive byte count;
// anything else is a located error naming the field; without a NET intent
// it warns (nothing to budget).
func TestNetworkBudget(t *testing.T) {
	withNet := manifest([]string{"CONSUMES NET:192.0.2.1:443/tcp"}, "")
	m := mustParse(t, withNet+"network:\n  max_egress_bytes: 100000\n")
	if m.EgressBudget() != 100000 || len(m.Warnings) != 0 {
		t.Errorf("budget %d, warnings %v", m.EgressBudget(), m.Warnings)
	}
	if m := mustParse(t, withNet); m.EgressBudget() != 0 {
		t.Errorf("no network section: budget %d", m.EgressBudget())
	}
	for _, tc := range []struct{ name, network, code string }{
		{"negative", "network:\n  max_egress_bytes: -5\n", "range"},
		{"zero", "network:\n  max_egress_bytes: 0\n", "range"},
		{"missing", "network: {}\n", "required"},
		{"a string", "network:\n  max_egress_bytes: lots\n", "type"},
		{"unknown field", "network:\n  max_egress: 5\n", "unknown-field"},
	} {
		_, err := Parse("t.yaml", []byte(withNet+tc.network))
		if !errors.Is(err, ErrInvalidManifest) || !slices.Contains(codes(err), tc.code) {
			t.Errorf("%s: %v (codes %v), want %s", tc.name, err, codes(err), tc.code)
			continue
		}
		if !strings.Contains(err.Error(), "t.yaml:") || !strings.Contains(err.Error(), "network.max_egress") {
			t.Errorf("%s: %q does not say where", tc.name, err)
		}
	}
	m = mustParse(t, manifest([]string{"CONSUMES FILE:/w/**"}, "")+"network:\n  max_egress_bytes: 10\n")
	if !slices.Contains(warningCodes(m), "unused") {
		t.Errorf("a budget without a NET intent: warnings %v", m.Warnings)
	}
}

func TestDeclaredPrefixes(t *testing.T) {
	rs := mustCompile(t, "CONSUMES NET:10.1.2.3:443/tcp", "CONSUMES NET:192.168.0.0/16:*",
		"CONSUMES NET:[fd00::/8]:53/udp", "CONSUMES NET:svc.example.com:443/tcp", "PROVIDES NET:172.16.0.1:8080/tcp", "CONSUMES NET:10.1.2.3:80/tcp")
	var got []string
	for _, p := range rs.DeclaredPrefixes() {
		got = append(got, p.String())
	}
	if want := "10.1.2.3/32 192.168.0.0/16 fd00::/8"; strings.Join(got, " ") != want {
		t.Errorf("DeclaredPrefixes = %v, want %s", got, want)
	}
}

// TestIPv6NetObjects: bracketed IPv6 addresses and prefixes parse and
// render back; a malformed one is a located diagnostic of the manifest
// whose problem says what is wrong (host bits, a zone, a mapped address,
// an IPv4 address in brackets), not only that it is no address.
func TestIPv6NetObjects(t *testing.T) {
	for _, s := range []string{"[2001:db8::10]:443", "[::1]:8080/tcp", "[2001:db8::/32]:*", "[fd00::/8]:53/udp"} {
		p, err := ParseNetPattern(s)
		if err != nil || p.String() != s || !p.Prefix.Addr().Is6() {
			t.Errorf("%s: %v, %v", s, p, err)
		}
	}
	for _, tc := range []struct{ obj, want string }{
		{"[2001:db8::1/32]:80", "host bits set; write 2001:db8::/32"},
		{"[fe80::1%eth0]:80", "zoned address"},
		{"[::ffff:10.0.0.1]:80", "write the IPv4 form 10.0.0.1"},
		{"[10.0.0.1]:80", "without brackets"},
		{"[2001:db8::1:80", "closing bracket"},
		{"2001:db8::1:80", "must be in brackets"},
	} {
		_, err := Parse("m.yaml", []byte(manifest([]string{"CONSUMES NET:" + tc.obj}, "")))
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Diags) != 1 {
			t.Errorf("%s: %v, want one diagnostic", tc.obj, err)
			continue
		}
		if d := ve.Diags[0]; d.Pos.Line == 0 || !strings.Contains(d.Problem, tc.want) {
			t.Errorf("%s: %+v, want it located and saying %q", tc.obj, d, tc.want)
		}
	}
}
