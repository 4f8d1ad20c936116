package receipt

import (
	"encoding/json"

	"github.com/klocklabs/klock/money"
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
	Seq          uint64     `json:"seq"`
	Prev         string     `json:"prev"`
	ID           string     `json:"id"`
	Timestamp    int64      `json:"timestamp"` // unix seconds
	Time         string     `json:"time"`      // RFC 3339 with nanoseconds
	CapabilityID string     `json:"capability_id"`
	AgentID      string     `json:"agent_id,omitempty"`
	ToolServer   string     `json:"tool_server,omitempty"`
	ToolName     string     `json:"tool_name"`
	Phase        string     `json:"phase"`
	Action       Action     `json:"action"`
	Decision     Decision   `json:"decision"`
	ContentHash  string     `json:"content_hash,omitempty"`
	PolicyHash   string     `json:"policy_hash,omitempty"`
	Evidence     []Evidence `json:"evidence,omitempty"`
	Metadata     Metadata   `json:"metadata"`
	// LedgerEvent is the budget ledger's event id this receipt records (0
	// for none); receipts are appended in ledger event order.
	LedgerEvent uint64 `json:"ledger_event"`
	KernelKey   string `json:"kernel_key"`
	Signature   string `json:"signature"`
}

// Action is what was attempted.
type Action struct {
	Parameters    json.RawMessage `json:"parameters,omitempty"`
	ParameterHash string          `json:"parameter_hash,omitempty"`
}

// Decision is the verdict, with the reason and the deciding guard on a deny.
type Decision struct {
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	Guard   string `json:"guard,omitempty"`
}

// Evidence is one guard's say.
type Evidence struct {
	GuardName string `json:"guard_name"`
	Verdict   bool   `json:"verdict"`
	Details   string `json:"details,omitempty"`
}

// Metadata holds the financial record and the token-level cost record.
type Metadata struct {
	Financial *Financial `json:"financial,omitempty"`
	Cost      *Cost      `json:"cost,omitempty"`
}

// Financial is seed 003's FinancialReceiptMetadata plus the ledger movement
// this decision made (LedgerDebit, LedgerCredit, InvocationDelta), so that
// for every grant sum(debit) - sum(credit) equals the ledger's charged total.
type Financial struct {
	GrantIndex       uint32            `json:"grant_index"`
	CostCharged      Units             `json:"cost_charged"`
	Currency         string            `json:"currency"`
	BudgetRemaining  *Units            `json:"budget_remaining"`
	BudgetTotal      *Units            `json:"budget_total"`
	DelegationDepth  uint32            `json:"delegation_depth"`
	RootBudgetHolder string            `json:"root_budget_holder"`
	PaymentReference string            `json:"payment_reference,omitempty"`
	SettlementStatus string            `json:"settlement_status"`
	CostBreakdown    json.RawMessage   `json:"cost_breakdown,omitempty"`
	OracleEvidence   *OracleEvidence   `json:"oracle_evidence"`
	AttemptedCost    *Units            `json:"attempted_cost"`
	Overrun          *Units            `json:"overrun,omitempty"`
	HoldID           string            `json:"hold_id,omitempty"`
	LedgerDebit      Units             `json:"ledger_debit"`
	LedgerCredit     Units             `json:"ledger_credit"`
	InvocationDelta  int8              `json:"invocation_delta"`
	InvocationsUsed  Units             `json:"invocations_used"`
	OriginalCost     *OriginalAmount   `json:"original_cost,omitempty"`
	Extra            map[string]string `json:"extra,omitempty"`
}

// OriginalAmount is a cost as the tool reported it, before conversion.
type OriginalAmount struct {
	Units    Units  `json:"units"`
	Currency string `json:"currency"`
}

// OracleEvidence is seed 003's OracleConversionEvidence.
type OracleEvidence struct {
	FromCurrency    string `json:"from_currency"`
	ToCurrency      string `json:"to_currency"`
	RateNumerator   Units  `json:"rate_numerator"`
	RateDenominator Units  `json:"rate_denominator"`
	MarginBPS       uint32 `json:"margin_bps"`
	OracleSource    string `json:"oracle_source"`
	RateTimestamp   int64  `json:"rate_timestamp"`
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
	Envelope *Envelope `json:"envelope,omitempty"`
	Estimate *Tokens   `json:"estimate,omitempty"`
	Actual   *Actual   `json:"actual,omitempty"`
	// Exceeded lists the envelope maxima the actual went over.
	Exceeded []string `json:"exceeded,omitempty"`
}

// Envelope is the part of the cost envelope the guard enforced.
type Envelope struct {
	MaxTokensIn  Units  `json:"max_tokens_in"`
	MaxTokensOut Units  `json:"max_tokens_out"`
	MaxLatencyMS Units  `json:"max_latency_ms"`
	MaxCost      *Units `json:"max_cost,omitempty"`
	Currency     string `json:"currency,omitempty"`
}

// Tokens is an estimate.
type Tokens struct {
	TokensIn  Units  `json:"tokens_in"`
	TokensOut Units  `json:"tokens_out"`
	Cost      *Units `json:"cost,omitempty"`
}

// Actual is a measured figure with its provenance (seed 000).
type Actual struct {
	TokensIn          Units  `json:"tokens_in"`
	TokensOut         Units  `json:"tokens_out"`
	LatencyMS         Units  `json:"latency_ms,omitempty"`
	Cost              *Units `json:"cost,omitempty"`
	Source            string `json:"source"`
	UnavailableReason string `json:"unavailable_reason,omitempty"`
}

// U returns a pointer to Units, for the optional fields.
func U(v uint64) *Units { u := Units(v); return &u }
