package budget

import (
	"errors"
	"fmt"

	"github.com/klocklabs/klock/guard/receipt"
)

// Sentinel errors, wrapped with %w.
var (
	ErrDenied       = errors.New("budget denied")
	ErrUnknownGrant = errors.New("unknown grant")
	ErrHoldNotOpen  = errors.New("hold is not open")
	ErrNoRate       = errors.New("no conversion rate")
	ErrWiden        = errors.New("delegation may only tighten a budget")
	ErrGrantChanged = errors.New("grant already defined with other limits")
	ErrLedger       = errors.New("budget ledger unavailable: charge refused")
	ErrBadRequest   = errors.New("bad budget request")
)

// Limit names, as in the manifest (and in DenyError.Limit).
const (
	LimitPerInvocation = "max_cost_per_invocation"
	LimitTotal         = "max_total_cost"
	LimitInvocations   = "max_invocations"
	LimitCurrency      = "currency"
)

// DenyError is a refused pre-charge.
type DenyError struct {
	Key       Key
	Limit     string // which limit would be exceeded
	Holder    Key    // the grant whose limit it is (an ancestor for delegated grants)
	Attempted string // the attempted cost, as "1.50 USD"
	Detail    string
	Receipt   *receipt.Receipt
}

func (e *DenyError) Error() string {
	return fmt.Sprintf("%s: %s of %s: %s", ErrDenied, e.Limit, e.Holder, e.Detail)
}

func (e *DenyError) Is(target error) bool { return target == ErrDenied }
