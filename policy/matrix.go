package policy

import (
	"fmt"
	"strings"
)

// MatrixRow is one row of seed 002's permissions matrix.
type MatrixRow struct {
	Tool         string     `json:"tool"`
	Capability   string     `json:"capability"`
	Category     string     `json:"category,omitempty"`
	SideEffect   SideEffect `json:"side_effect"`
	Window       string     `json:"rollback_window,omitempty"`
	Idempotent   string     `json:"idempotent"`
	Rollback     string     `json:"rollback"`
	Unsupervised string     `json:"unsupervised_autonomy"`
	// UnsupervisedCEL is the CEL that decides a conditional row: the
	// condition itself, or its translation from seed 002's syntax.
	UnsupervisedCEL string   `json:"unsupervised_cel,omitempty"`
	ApprovalNeeded  string   `json:"approval_needed"`
	BlastRadius     string   `json:"blast_radius"`
	Trifecta        []string `json:"trifecta,omitempty"`
	// CostPerInvocation is KCC's declared cost of one call ("0.03 USD",
	// "1200 tokens"): money is charged per call on top of the reported
	// cost, to the tool's grant.
	CostPerInvocation string `json:"cost_per_invocation,omitempty"`
	// Permission is the contract's seed 002 permission, as enforced.
	Permission *Permission `json:"permission,omitempty"`
}

// PermissionsMatrix rolls the tool contracts up into one table: what the
// agent can do and at what autonomy level. Under a forced or declared HITL
// mode every tool that writes or communicates needs approval.
func (m *Manifest) PermissionsMatrix() []MatrixRow {
	mode, _ := m.EffectiveHITL()
	rows := make([]MatrixRow, 0, len(m.DeclaredTools))
	for i := range m.DeclaredTools {
		t := &m.DeclaredTools[i]
		row := MatrixRow{
			Tool: t.Name, Capability: t.CapabilityCode(), Category: t.Category,
			SideEffect: t.SideEffects, BlastRadius: t.BlastRadius, Window: t.Rollback.Window,
		}
		switch {
		case t.SideEffects == SideEffectRead:
			row.Idempotent, row.Rollback = "n/a", "n/a"
		default:
			row.Idempotent = map[string]string{"natural": "yes", "key": "key", "none": "no", "": "no"}[t.Idempotency.Mode]
			row.Rollback = t.Rollback.Mechanism
			if row.Rollback == "" {
				row.Rollback = "none"
			}
		}
		switch {
		case t.Autonomy.UnsupervisedIf != "":
			row.Unsupervised = t.Autonomy.UnsupervisedIf
			if c, err := CompileAutonomy(t); err == nil && c != nil {
				row.UnsupervisedCEL = c.CEL
			}
			row.ApprovalNeeded = "else yes"
			if t.Autonomy.Else == "DENY" {
				row.ApprovalNeeded = "else denied"
			}
		case t.Autonomy.Unsupervised == "always" || t.Autonomy.Unsupervised == "" && t.SideEffects == SideEffectRead:
			row.Unsupervised, row.ApprovalNeeded = "always", "never"
		default:
			row.Unsupervised, row.ApprovalNeeded = "never", "always"
		}
		if mode == HITLModeHITL && (t.SideEffects != SideEffectRead || t.ExternalCommunication) && row.ApprovalNeeded != "always" {
			row.ApprovalNeeded = "always (HITL)"
		}
		if t.UntrustedContent {
			row.Trifecta = append(row.Trifecta, "untrusted")
		}
		if t.PrivateDataAccess {
			row.Trifecta = append(row.Trifecta, "private")
		}
		if t.ExternalCommunication {
			row.Trifecta = append(row.Trifecta, "external")
		}
		if c := t.CostPerInvocation; c != nil && c.Money != nil {
			row.CostPerInvocation = c.Money.String()
		} else if c != nil && c.Tokens > 0 {
			row.CostPerInvocation = fmt.Sprintf("%d tokens", c.Tokens)
		}
		if p := t.Permission; p.ActsAs != "" || len(p.Scope)+len(p.Forbidden) > 0 {
			row.Permission = &p
		}
		rows = append(rows, row)
	}
	return rows
}

// SideEffectLabel renders a side effect with its rollback window, as seed 002
// writes "REVERSIBLE-WRITE (24h)".
func (r MatrixRow) SideEffectLabel() string {
	if w := windowRe.FindString(strings.TrimSpace(r.Window)); r.SideEffect == SideEffectReversibleWrite && w != "" {
		return string(r.SideEffect) + " (" + w + ")"
	}
	return string(r.SideEffect)
}
