package policy

// Trifecta is the lethal-trifecta verdict over the declared tools: one tool
// for each of untrusted content, private data and external communication.
type Trifecta struct {
	Present   bool   `json:"present"`
	Untrusted string `json:"untrusted_content,omitempty"`
	Private   string `json:"private_data_access,omitempty"`
	External  string `json:"external_communication,omitempty"`
	// Why says, for each of the three found, what made it so: declared,
	// or inferred (trifecta_infer.go).
	Why []string `json:"why,omitempty"`
}

// Trifecta reports whether the declared tools (and the agent's own NET
// intents, for external communication) together give the agent all three
// trifecta capabilities, declared or inferred, naming the first found for
// each.
func (m *Manifest) Trifecta() Trifecta {
	var t Trifecta
	found := func(dst *string, name, what, why string) {
		if why != "" && *dst == "" {
			*dst = name
			t.Why = append(t.Why, name+": "+what+" ("+why+")")
		}
	}
	for i := range m.DeclaredTools {
		tool := &m.DeclaredTools[i]
		found(&t.Untrusted, tool.Name, "untrusted content", tool.UntrustedContentWhy())
		found(&t.Private, tool.Name, "private data", tool.PrivateDataWhy())
		found(&t.External, tool.Name, "external communication", tool.ExternalCommunicationWhy())
	}
	if in, ok := m.ExternalIntent(); ok {
		found(&t.External, "intent "+in.String(), "external communication", "a NET intent beyond loopback")
	}
	t.Present = t.Untrusted != "" && t.Private != "" && t.External != ""
	return t
}

// EffectiveHITL is the mode the agent actually runs in, and why.
func (m *Manifest) EffectiveHITL() (HITLMode, string) {
	if tri := m.Trifecta(); tri.Present {
		return HITLModeHITL, "forced: lethal trifecta (" + tri.Untrusted + " + " + tri.Private + " + " + tri.External + ")"
	}
	if m.HITL.DefaultMode == HITLModeHOTL {
		return HITLModeHOTL, "declared"
	}
	return HITLModeHITL, "declared"
}
