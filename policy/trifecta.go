package policy

// Trifecta is the lethal-trifecta verdict over the declared tools: one tool
// for each of untrusted content, private data and external communication.
type Trifecta struct {
	Present   bool   `json:"present"`
	Untrusted string `json:"untrusted_content,omitempty"`
	Private   string `json:"private_data_access,omitempty"`
	External  string `json:"external_communication,omitempty"`
}

// Trifecta reports whether the declared tools together give the agent all
// three trifecta capabilities, naming the first tool found for each.
func (m *Manifest) Trifecta() Trifecta {
	var t Trifecta
	for _, tool := range m.DeclaredTools {
		if tool.UntrustedContent && t.Untrusted == "" {
			t.Untrusted = tool.Name
		}
		if tool.PrivateDataAccess && t.Private == "" {
			t.Private = tool.Name
		}
		if tool.ExternalCommunication && t.External == "" {
			t.External = tool.Name
		}
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
