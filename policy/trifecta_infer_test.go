package policy

import (
	"strings"
	"testing"
)

// TestTrifectaInferred: a manifest whose tools leave the
// three flags out is still a lethal trifecta when their types, categories
// and contracts say so, or when the agent's own NET intents reach out.
func TestTrifectaInferred(t *testing.T) {
	m := &Manifest{DeclaredTools: []Tool{
		{Name: "fetch_page", Type: "external", SideEffects: SideEffectRead},
		{Name: "crm_lookup", Type: "read", SideEffects: SideEffectRead, InputSchema: map[string]*ParamSchema{"customer_id": {Type: "string", MustMatch: "task.customer_id"}}},
		{Name: "post_webhook", Category: "D", SideEffects: SideEffectIrreversibleWrite},
	}}
	tri := m.Trifecta()
	if !tri.Present || tri.Untrusted != "fetch_page" || tri.Private != "crm_lookup" || tri.External != "fetch_page" {
		t.Fatalf("inferred trifecta: %+v", tri)
	}
	if mode, why := m.EffectiveHITL(); mode != HITLModeHITL || !strings.Contains(why, "trifecta") {
		t.Fatalf("HITL not forced: %s %s", mode, why)
	}

	// External communication through the agent's own NET intent.
	in, err := ParseIntent("CONSUMES NET:api.example.com:443/tcp")
	if err != nil {
		t.Fatal(err)
	}
	lo, _ := ParseIntent("CONSUMES NET:127.0.0.1:8080/tcp")
	m = &Manifest{Intents: []Intent{lo}, DeclaredTools: []Tool{
		{Name: "read_mail", UntrustedContent: true, SideEffects: SideEffectRead},
		{Name: "hr_db", Type: "internal", SideEffects: SideEffectRead},
	}}
	if tri := m.Trifecta(); tri.Present {
		t.Fatalf("loopback only is no external communication: %+v", tri)
	}
	m.Intents = append(m.Intents, in)
	if tri := m.Trifecta(); !tri.Present || !strings.Contains(tri.External, "api.example.com") {
		t.Fatalf("NET intent beyond loopback: %+v", tri)
	}
}
