package check

import "context"

// Charger is the seam for budgets (issue 7): the gateway reserves the worst
// case before it dispatches an allowed call, reconciles with the actual cost
// after, and releases the reservation when the call did not run. A nil
// Charger means no budget is configured; the gateway then skips all three.
//
// Reserve returning an error refuses the call; the error should be a
// *toolerr.Error (tool_restricted for an exhausted budget), anything else is
// reported as tool_internal_error.
type Charger interface {
	Reserve(ctx context.Context, call *Call, d *Decision) (Reservation, error)
	Reconcile(ctx context.Context, r Reservation, actual Usage) error
	Release(ctx context.Context, r Reservation) error
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
}
