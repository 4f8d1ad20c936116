package policy

import "net/netip"

// The lethal trifecta was only what each tool said about itself: a tool
// that posts to the internet but forgot external_communication: true hid
// the trifecta and kept the agent HOTL. These infer the three properties
// from what the manifest declares elsewhere, so leaving a flag out can only
// make klock stricter, never laxer. Each returns why ("" when not).

// ExternalCommunicationWhy reports whether the tool can reach outside: declared,
// type external, or category D (seed 004's critical tools, external_api
// among them).
func (t *Tool) ExternalCommunicationWhy() string {
	switch {
	case t.ExternalCommunication:
		return "declared external_communication"
	case t.Type == "external":
		return "type: external"
	case t.Category == "D":
		return "category D"
	}
	return ""
}

// PrivateDataWhy reports whether the tool reads private data: declared,
// type internal (an organization's own systems), or an input bound to the
// task's principal (must_match, must_belong_to: the data is someone's).
func (t *Tool) PrivateDataWhy() string {
	switch {
	case t.PrivateDataAccess:
		return "declared private_data_access"
	case t.Type == "internal":
		return "type: internal"
	}
	for name, p := range t.InputSchema {
		if p == nil {
			continue
		}
		if p.MustMatch != "" {
			return "input " + name + " is bound to " + p.MustMatch + " (must_match)"
		}
		if p.MustBelongTo != "" {
			return "input " + name + " must belong to " + p.MustBelongTo
		}
	}
	return ""
}

// UntrustedContentWhy reports whether the tool brings outside content into
// the agent's context: declared, or a READ of an external tool (type
// external or category D), whose result someone else wrote.
func (t *Tool) UntrustedContentWhy() string {
	switch {
	case t.UntrustedContent:
		return "declared untrusted_content"
	case t.SideEffects == SideEffectRead && (t.Type == "external" || t.Category == "D"):
		return "reads from an external tool"
	}
	return ""
}

// ExternalIntent returns the first NET intent that reaches beyond loopback:
// the agent itself can then communicate externally, whatever its tools say.
func (m *Manifest) ExternalIntent() (Intent, bool) {
	for _, in := range m.Intents {
		if in.Object.Type != ObjNet {
			continue
		}
		if !loopbackOnly(in.Object.Net) {
			return in, true
		}
	}
	return Intent{}, false
}

func loopbackOnly(n NetPattern) bool {
	if n.Raw {
		return false
	}
	if n.Host != "" {
		return n.Host == "localhost"
	}
	p := n.Prefix
	if !p.IsValid() {
		return false
	}
	addr, bits := p.Addr().Unmap(), p.Bits()
	if !addr.Is4() {
		return addr == netip.IPv6Loopback() && bits == 128
	}
	if p.Addr().Is4In6() {
		bits -= 96
	}
	return netip.MustParsePrefix("127.0.0.0/8").Contains(addr) && bits >= 8
}
