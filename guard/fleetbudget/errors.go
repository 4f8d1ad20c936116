package fleetbudget

import (
	"errors"
	"fmt"

	"github.com/klocklabs/klock/guard/budget"
)

// Sentinel errors, wrapped with %w.
var (
	// ErrUnavailable: a call needed a new block and etcd did not answer.
	// Errors wrapping it wrap budget.ErrLedger too: the charge is refused.
	ErrUnavailable = errors.New("fleet budget unavailable")
	// ErrCorrupt: a grant's key holds something that is not a record.
	ErrCorrupt = errors.New("fleet budget record unreadable")
	// ErrGrantChanged: the fleet defined the grant with other limits.
	ErrGrantChanged = fmt.Errorf("fleet budget: %w", budget.ErrGrantChanged)
	// ErrMismatch: receipt chains and the fleet's ledger disagree.
	ErrMismatch = errors.New("receipts do not add up to the fleet ledger")
)
