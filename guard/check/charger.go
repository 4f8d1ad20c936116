package check

import "context"

// Charger is the seam for budgets: the gateway reserves the worst
// case before it dispatches an allowed call, reconciles with the actual cost
// once the tool ran (or may have run), and releases the reservation when a
// later refusal kept the call from the tool. A nil Charger means no budget
// is configured; the gateway then skips all three.
//
// Reserve returning an error refuses the call; the error should be a
// *toolerr.Error (tool_restricted for an exhausted budget), anything else is
// reported as tool_internal_error. A nil Reservation with a nil error means
// the call is not charged (its tool has no grant).
type Charger interface {
	Reserve(ctx context.Context, call *Call, d *Decision) (Reservation, error)
	// Reconcile settles a reservation with what the tool reported. When
	// actual.Known is false the reservation stands in full, recorded as
	// unavailable with actual.Reason.
	Reconcile(ctx context.Context, r Reservation, actual Usage) (*Charged, error)
	// Release reverses a reservation whose call never reached the tool.
	Release(ctx context.Context, r Reservation, reason string) error
}

// Reservation is the charger's handle on one reserved call.
type Reservation interface{}

// Usage is what one call actually cost, as the tool reported it.
type Usage struct {
	TokensUsed int64
	// Cost in integer minor units of Currency; Known false when the tool
	// reported none (never guessed).
	CostUnits uint64
	Currency  string
	Known     bool
	// Reason says why the cost is unknown (Known false).
	Reason string
	// Breakdown is the tool's itemized cost as it sent it (the cost is its
	// sum), copied into the receipt's cost_breakdown.
	Breakdown []byte
	// ReportedBy says where the reported cost came from (a plugin's
	// answer, an MCP result's _meta), for the receipt's evidence.
	ReportedBy string
	// ContentHash is the call's arguments and result, hashed (keyed in
	// confidential mode): the receipt's content_hash. The gateway sets it.
	ContentHash string
}

// Charged is what a reconciled call was charged against its grant.
type Charged struct {
	Units    uint64 `json:"units"`
	Currency string `json:"currency"`
	// Source is the actual's provenance: harness-reported when the tool
	// reported its cost, unavailable when the reservation stood.
	Source string `json:"source"`
}
