package budget

import (
	"fmt"

	"github.com/klocklabs/klock/guard/money"
)

// A reconcile whose reported cost cannot be converted (no rate, or a rate
// that cannot convert it) settles at the reserved worst case; its receipt's
// financial extra says so: settled_at "reservation", and settled_why.
const (
	ExtraSettledAt       = "settled_at"
	ExtraSettledWhy      = "settled_why"
	SettledAtReservation = "reservation"
)

// RateTable is the configured conversion rates, by "FROM->TO", and the
// source name recorded as oracle evidence in receipts.
type RateTable struct {
	Source string
	// Timestamp is when the table's rates were fixed (unix seconds).
	Timestamp int64
	rates     map[string]money.Rate
}

// NewRateTable checks and indexes rates; a duplicate pair is an error.
func NewRateTable(source string, at int64, rates ...money.Rate) (*RateTable, error) {
	t := &RateTable{Source: source, Timestamp: at, rates: map[string]money.Rate{}}
	for _, r := range rates {
		if _, err := r.Convert(money.Amount{Currency: r.From}); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		k := r.From + "->" + r.To
		if _, dup := t.rates[k]; dup {
			return nil, fmt.Errorf("%w: rate %s given twice", ErrBadRequest, k)
		}
		t.rates[k] = r
	}
	return t, nil
}

func (t *RateTable) lookup(from, to string) (money.Rate, bool) {
	if t == nil {
		return money.Rate{}, false
	}
	r, ok := t.rates[from+"->"+to]
	return r, ok
}
