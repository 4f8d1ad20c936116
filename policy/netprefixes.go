package policy

import "net/netip"

// DeclaredPrefixes are the address prefixes of the manifest's own
// CONSUMES NET intents (an exact address is a /32 or /128), in order,
// once each: the addresses the operator named. The baseline's, the
// amendments' and those Resolve found for a host name are not.
func (rs *Ruleset) DeclaredPrefixes() []netip.Prefix {
	var out []netip.Prefix
	seen := map[netip.Prefix]bool{}
	for _, in := range rs.Intents {
		n := in.Object.Net
		if in.Origin != "manifest" || in.Object.Type != ObjNet || !AccessOf(in.Predicate).Has(Consumes) || n.Raw || n.Host != "" || !n.Prefix.IsValid() {
			continue
		}
		if p := n.Prefix.Masked(); !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
