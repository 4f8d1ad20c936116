package dnsproxy

import (
	"net"
	"net/netip"
)

// Special-purpose ranges an answer for a public name must not point into
// (DNS rebinding: a name the agent's scope declares, answered by a zone the
// agent or an attacker controls, would otherwise open the wall to the
// host's own services or to the local network). The registry is RFC 6890's
// (IANA special-purpose address registries); the loopback, link-local,
// multicast and RFC 1918 / RFC 4193 ranges come from netip's own tests.
var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // the clouds' instance metadata (AWS, GCP, Azure, ...)
		netip.MustParseAddr("fd00:ec2::254"),   // AWS's IPv6 instance metadata
	}
	specialPrefixes = []struct {
		p   netip.Prefix
		why string
	}{
		{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" (RFC 1122)"},
		{netip.MustParsePrefix("100.64.0.0/10"), "shared address space, carrier-grade NAT (RFC 6598)"},
		{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking range (RFC 2544)"},
		{netip.MustParsePrefix("240.0.0.0/4"), "reserved, or the broadcast address (RFC 1112, RFC 919)"},
		{netip.MustParsePrefix("fec0::/10"), "site-local (RFC 3879)"},
		{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 prefix (RFC 8215), translated into the local network"},
	}
	// nat64 is the well-known NAT64 prefix: an address in it reaches the
	// IPv4 address in its last 32 bits (RFC 6052), judged as that address.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// sixToFour is 6to4 (RFC 3056): a host with a 6to4 relay sends an
	// address in it to the IPv4 address in its bits 16-47, judged as
	// that address.
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Classify says why an answered address must not be given to the agent
// nor open its wall, or "" when it may: a public unicast address, or one
// the manifest declares (declared holds the prefixes of its address
// intents: an exact address is a /32 or /128). local are the host's own
// addresses and the session's veth pair's, refused whatever their range.
// An IPv4-mapped IPv6 address is judged as its IPv4 address.
func Classify(a netip.Addr, declared []netip.Prefix, local []netip.Addr) string {
	a = a.Unmap()
	if !a.IsValid() {
		return "not an address"
	}
	for _, p := range declared {
		if p.Addr().Is4In6() {
			// ::ffff:10.0.0.0/104 is 10.0.0.0/8.
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		if p.Contains(a) {
			return ""
		}
	}
	if nat64.Contains(a) {
		b := a.As16()
		if why := Classify(netip.AddrFrom4([4]byte(b[12:])), nil, local); why != "" {
			return "NAT64 of a " + why
		}
	}
	if sixToFour.Contains(a) {
		b := a.As16()
		if why := Classify(netip.AddrFrom4([4]byte(b[2:6])), nil, local); why != "" {
			return "6to4 of a " + why
		}
	}
	for _, l := range local {
		if l.Unmap() == a {
			return "an address of this host or of the session's link to it"
		}
	}
	for _, m := range metadataAddrs {
		if m == a {
			return "cloud instance metadata address"
		}
	}
	switch {
	case a.IsUnspecified():
		return "unspecified address"
	case a.IsLoopback():
		return "loopback address"
	case a.IsLinkLocalUnicast():
		return "link-local address"
	case a.IsMulticast():
		return "multicast address"
	case a.IsPrivate() && a.Is4():
		return "private address (RFC 1918)"
	case a.IsPrivate():
		return "unique local address (RFC 4193)"
	}
	for _, s := range specialPrefixes {
		if s.p.Contains(a) {
			return s.why
		}
	}
	return ""
}

// HostAddrs are the addresses of this host's interfaces now (nil when
// the kernel cannot say: the special ranges are refused all the same).
func HostAddrs() []netip.Addr {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ifa := range ifas {
		if n, ok := ifa.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

// rangeStarts are the first addresses of the ranges Classify refuses.
var rangeStarts = []string{"0.0.0.0", "10.0.0.0", "100.64.0.0", "127.0.0.0", "169.254.0.0", "172.16.0.0", "192.168.0.0",
	"198.18.0.0", "224.0.0.0", "240.0.0.0", "::", "::1", "64:ff9b::", "64:ff9b:1::", "2002::", "fc00::", "fe80::", "fec0::", "ff00::"}

// NonPublic reports whether a declared prefix holds addresses Classify
// refuses without a declaration: its answers for a declared name are given
// to the agent only because the manifest declares the prefix.
func NonPublic(p netip.Prefix) bool {
	p = p.Masked()
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
	}
	if Classify(p.Addr(), nil, nil) != "" {
		return true
	}
	for _, s := range rangeStarts {
		if p.Contains(netip.MustParseAddr(s)) {
			return true
		}
	}
	for _, m := range metadataAddrs {
		if p.Contains(m) {
			return true
		}
	}
	return false
}
