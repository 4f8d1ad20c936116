//go:build linux

package netguard

import (
	"encoding/binary"
	"net/netip"

	"github.com/klocklabs/klock/policy"
)

// compile turns rs's NET rules into the kernel's per-session policy.
//
// A host-name rule must come with the address rules Resolve produced for it
// (same intent), unless it is a "*." wildcard or a permissive lease (their
// addresses come from the session's DNS proxy, policy.Ruleset.WithHostAddrs);
// the host rule itself is not written, its addresses are. IPv4 prefixes are stored IPv4-mapped with family AF_INET (the BPF side
// checks ::ffff:a.b.c.d destinations against them). Identical address rules
// are merged (their access bits joined) before the MaxRules check.
func compile(rs *policy.Ruleset) (*netguardNgPolicy, error) {
	pol := &netguardNgPolicy{}
	if rs == nil {
		return pol, nil
	}
	type key struct {
		addr, mask    [4]uint32
		lo, hi        uint16
		family, proto uint8
	}
	index := map[key]int{}
	for i, r := range rs.Net {
		p := r.Pattern
		if p.Raw {
			pol.Flags |= flagRaw
			continue
		}
		if p.Host != "" {
			// A wildcard, a name a permissive session learned (a lease:
			// a name its DNS proxy refused), and a name looked up with
			// nothing to open at start have addresses only once the
			// session's DNS proxy answers them: none yet walls nothing in.
			if !resolvedAt(rs, i) && !rs.LookedUp(p.Host) && !p.IsWildcard() && rs.Intents[r.Intent].Origin != "lease" {
				return nil, &UnresolvedError{Host: p.Host, Intent: intentName(rs, r.Intent)}
			}
			continue
		}
		if !p.Prefix.IsValid() {
			return nil, &UnresolvedError{Host: p.String(), Intent: intentName(rs, r.Intent)}
		}
		var access uint8
		if r.Access.Has(policy.Consumes) {
			access |= accConnect
		}
		if r.Access.Has(policy.Provides) {
			access |= accBind
		}
		if access == 0 {
			continue // no NET meaning (validation rejects these)
		}
		addr, mask, family := encodePrefix(p.Prefix)
		k := key{addr, mask, p.Ports.Lo, p.Ports.Hi, family, uint8(p.Proto)}
		if j, ok := index[k]; ok {
			pol.Rules[j].Access |= access
			continue
		}
		if int(pol.N) == MaxRules {
			return nil, &TooManyRulesError{Limit: MaxRules, Intent: intentName(rs, r.Intent), Rule: p.String()}
		}
		index[k] = int(pol.N)
		pol.Rules[pol.N] = netguardNgRule{Addr: addr, Mask: mask, PortLo: p.Ports.Lo, PortHi: p.Ports.Hi,
			Family: family, Proto: uint8(p.Proto), Access: access}
		pol.N++
	}
	return pol, nil
}

// resolvedAt reports whether the host rule at i has at least one address
// rule of the same intent: an intent has one object, so an address rule
// carrying a host intent's index can only come from policy.Ruleset.Resolve.
func resolvedAt(rs *policy.Ruleset, i int) bool {
	h := rs.Net[i]
	for _, n := range rs.Net {
		if n.Intent == h.Intent && n.Pattern.Host == "" && !n.Pattern.Raw && n.Pattern.Prefix.IsValid() {
			return true
		}
	}
	return false
}

func intentName(rs *policy.Ruleset, i int) string {
	if i >= 0 && i < len(rs.Intents) {
		return rs.Intents[i].String()
	}
	return "an unknown intent"
}

// encodePrefix returns the masked address and mask as four words holding
// network-order bytes (as the kernel's user_ip6[] reads them), and the
// family the BPF side compares.
func encodePrefix(p netip.Prefix) (addr, mask [4]uint32, family uint8) {
	p = p.Masked()
	a := p.Addr()
	bits := p.Bits()
	family = afInet6
	if a.Is4() || a.Is4In6() {
		family = afInet
		if a.Is4() {
			bits += 96
		}
		a = netip.AddrFrom16(a.As16())
	}
	b := a.As16()
	var m [16]byte
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	for i := 0; i < 4; i++ {
		addr[i] = binary.NativeEndian.Uint32(b[i*4:])
		mask[i] = binary.NativeEndian.Uint32(m[i*4:])
	}
	return addr, mask, family
}

// decodeAddr turns four kernel words back into an address; an IPv4-mapped
// IPv6 address becomes IPv4 (the rules that decided it were IPv4).
func decodeAddr(w [4]uint32, family uint16) netip.Addr {
	var b [16]byte
	for i := 0; i < 4; i++ {
		binary.NativeEndian.PutUint32(b[i*4:], w[i])
	}
	if family == afInet {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b).Unmap()
}
