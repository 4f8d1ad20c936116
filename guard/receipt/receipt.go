package receipt

import (
	"encoding/json"

	"github.com/klocklabs/klock/policy/money"
)

// Verdicts of a decision (SPEC-DIGEST: allow | deny | cancelled | incomplete).
const (
	Allow      = "allow"
	Deny       = "deny"
	Cancelled  = "cancelled"
	Incomplete = "incomplete"
)

// Phases of the budget cycle a receipt records.
const (
	PhasePreCharge = "pre-charge" // worst case reserved before dispatch (or denied)
	PhaseReconcile = "reconcile"  // actual cost settled against the pre-charge
	PhaseReverse   = "reverse"    // pre-charge fully reversed: the call never ran
	PhaseGuard     = "guard"      // a decision with no ledger movement (Token Guard, meter)
	PhaseRollback  = "rollback"   // a REVERSIBLE-WRITE's compensation run after its session was killed
)

// Settlement statuses (seed 003 SettlementStatus).
const (
	NotApplicable = "not_applicable"
	Pending       = "pending"
	Settled       = "settled"
	Failed        = "failed"
)

// Every integer that can grow with input is Units, never a bare int64: a
// JSON number beyond 2^53 would be rounded by canonicalization.

// Receipt is one signed decision. Field names follow Chio receipts; the
// klock additions (phase, agent_id, ledger_event, metadata.cost and the
// ledger_* fields of the financial metadata) are what make the ledger
// recomputable from the receipts alone.
type Receipt struct {
	Action       Action     `json:"action,omitzero"`
	AgentID      string     `json:"agent_id,omitempty"`
	CapabilityID string     `json:"capability_id"`
	ContentHash  string     `json:"content_hash,omitempty"`
	Decision     Decision   `json:"decision"`
	Evidence     []Evidence `json:"evidence,omitempty"`
	ID           string     `json:"id"`
	KernelKey    string     `json:"kernel_key"`
	// LedgerEvent is the budget ledger's event id this receipt records (0
	// for none); receipts are appended in ledger event order.
	LedgerEvent uint64   `json:"ledger_event"`
	Metadata    Metadata `json:"metadata,omitzero"`
	Phase       string   `json:"phase"`
	PolicyHash  string   `json:"policy_hash,omitempty"`
	Prev        string   `json:"prev,omitempty"`
	// Proof, on a receipt signed as part of a batch, places it in the
	// batch whose Merkle root Signature signs (merkle.go); nil on a
	// receipt signed alone.
	Proof      *Proof `json:"proof,omitempty"`
	Seq        uint64 `json:"seq,omitempty"`
	Signature  string `json:"signature,omitempty"`
	Time       string `json:"time"`      // RFC 3339 with nanoseconds
	Timestamp  int64  `json:"timestamp"` // unix seconds
	ToolName   string `json:"tool_name"`
	ToolServer string `json:"tool_server,omitempty"`
}

// Action is what was attempted.
type Action struct {
	ParameterHash string          `json:"parameter_hash,omitempty"`
	Parameters    json.RawMessage `json:"parameters,omitempty"`
}

// Decision is the verdict, with the reason and the deciding guard on a deny.
type Decision struct {
	Guard   string `json:"guard,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Verdict string `json:"verdict"`
}

// Evidence is one guard's say.
type Evidence struct {
	Details   string `json:"details,omitempty"`
	GuardName string `json:"guard_name"`
	Verdict   bool   `json:"verdict"`
}

// Metadata holds the financial record and the token-level cost record.
type Metadata struct {
	Cost      *Cost      `json:"cost,omitempty"`
	Financial *Financial `json:"financial,omitempty"`
}

// Financial is seed 003's FinancialReceiptMetadata plus the ledger movement
// this decision made (LedgerDebit, LedgerCredit, InvocationDelta), so that
// for every grant sum(debit) - sum(credit) equals the ledger's charged total.
// ParentGrant is the delegating grant (capability#index) of a grant delegated
// from another (DelegationDepth > 0): every charge to it is charged there too.
type Financial struct {
	AttemptedCost    *Units            `json:"attempted_cost,omitempty"`
	BudgetRemaining  *Units            `json:"budget_remaining,omitempty"`
	BudgetTotal      *Units            `json:"budget_total,omitempty"`
	CostBreakdown    json.RawMessage   `json:"cost_breakdown,omitempty"`
	CostCharged      Units             `json:"cost_charged"`
	Currency         string            `json:"currency"`
	DelegationDepth  uint32            `json:"delegation_depth"`
	Extra            map[string]string `json:"extra,omitempty"`
	GrantIndex       uint32            `json:"grant_index"`
	HoldID           string            `json:"hold_id,omitempty"`
	InvocationDelta  int8              `json:"invocation_delta"`
	InvocationsUsed  Units             `json:"invocations_used"`
	LedgerCredit     Units             `json:"ledger_credit"`
	LedgerDebit      Units             `json:"ledger_debit"`
	OracleEvidence   *OracleEvidence   `json:"oracle_evidence,omitempty"`
	OriginalCost     *OriginalAmount   `json:"original_cost,omitempty"`
	Overrun          *Units            `json:"overrun,omitempty"`
	ParentGrant      string            `json:"parent_grant,omitempty"`
	PaymentReference string            `json:"payment_reference,omitempty"`
	RootBudgetHolder string            `json:"root_budget_holder"`
	SettlementStatus string            `json:"settlement_status"`
}

// OriginalAmount is a cost as the tool reported it, before conversion.
type OriginalAmount struct {
	Currency string `json:"currency"`
	Units    Units  `json:"units"`
}

// OracleEvidence is seed 003's OracleConversionEvidence.
type OracleEvidence struct {
	FromCurrency    string `json:"from_currency"`
	MarginBPS       uint32 `json:"margin_bps"`
	OracleSource    string `json:"oracle_source"`
	RateDenominator Units  `json:"rate_denominator"`
	RateNumerator   Units  `json:"rate_numerator"`
	RateTimestamp   int64  `json:"rate_timestamp"`
	ToCurrency      string `json:"to_currency"`
}

// EvidenceFor renders a conversion rate as receipt evidence.
func EvidenceFor(r money.Rate, source string, at int64) *OracleEvidence {
	return &OracleEvidence{FromCurrency: r.From, ToCurrency: r.To, RateNumerator: Units(r.Numerator),
		RateDenominator: Units(r.Denominator), MarginBPS: r.MarginBPS, OracleSource: source, RateTimestamp: at}
}

// Cost is the Token Guard's record of one model or tool invocation: the
// envelope it was held to, the estimate, and the actual with its source.
// Estimates and actuals stay apart so calibration compares like with like.
type Cost struct {
	Actual   *Actual   `json:"actual,omitempty"`
	Envelope *Envelope `json:"envelope,omitempty"`
	Estimate *Tokens   `json:"estimate,omitempty"`
	// Exceeded lists the envelope maxima the actual went over.
	Exceeded []string `json:"exceeded,omitempty"`
	// Kind says what was called: "model" (klock meter) or "tool" (the
	// gateway), so a report never mixes the two. Empty in older receipts:
	// a cost held to an envelope is a model call's.
	Kind string `json:"kind,omitempty"`
	// RunID is the agent invocation the call belonged to (the envelope is
	// held per invocation, across its calls).
	RunID string `json:"run_id,omitempty"`
}

// Kinds of a Cost.
const (
	KindModel = "model"
	KindTool  = "tool"
)

// CallKind returns c's kind, inferring it for receipts written before Kind.
func (c *Cost) CallKind() string {
	switch {
	case c.Kind != "":
		return c.Kind
	case c.Envelope != nil || c.Estimate != nil || len(c.Exceeded) > 0:
		// Only a model call is held to the envelope; the gateway's tool
		// receipts carried the actual alone.
		return KindModel
	}
	return KindTool
}

// Envelope is the part of the cost envelope the guard enforced.
type Envelope struct {
	Currency     string `json:"currency,omitempty"`
	MaxCost      *Units `json:"max_cost,omitempty"`
	MaxLatencyMS Units  `json:"max_latency_ms"`
	MaxTokensIn  Units  `json:"max_tokens_in"`
	MaxTokensOut Units  `json:"max_tokens_out"`
}

// Tokens is an estimate.
type Tokens struct {
	Cost      *Units `json:"cost,omitempty"`
	TokensIn  Units  `json:"tokens_in"`
	TokensOut Units  `json:"tokens_out"`
}

// Actual is a measured figure with its provenance (seed 000).
type Actual struct {
	Cost              *Units `json:"cost,omitempty"`
	LatencyMS         Units  `json:"latency_ms,omitempty"`
	Source            string `json:"source"`
	TokensIn          Units  `json:"tokens_in"`
	TokensOut         Units  `json:"tokens_out"`
	UnavailableReason string `json:"unavailable_reason,omitempty"`
}

// U returns a pointer to Units, for the optional fields.
func U(v uint64) *Units { u := Units(v); return &u }
