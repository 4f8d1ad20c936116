package budget

import (
	"fmt"
	"time"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

// A reconcile whose reported cost cannot be converted (no rate, or a rate
// that cannot convert it) settles at the reserved worst case; its receipt's
// financial extra says so: settled_at "reservation", and settled_why.
const (
	ExtraSettledAt       = "settled_at"
	ExtraSettledWhy      = "settled_why"
	SettledAtReservation = "reservation"
)

// SourcedRate is one conversion rate with its evidence: who stated it and
// when (seed 003's oracle_source and rate_timestamp).
type SourcedRate struct {
	money.Rate
	Source string
	At     int64 // unix seconds
}

// RateTable is the configured conversion rates, by "FROM->TO", each with
// its source and time, which receipts record as oracle evidence.
type RateTable struct {
	// File and FileSHA256 name the rates file the table was read from
	// (empty for a table built in code); receipts cite them.
	File, FileSHA256 string
	rates            map[string]SourcedRate
}

// NewRateTable checks and indexes rates that share one source and time; a
// duplicate pair is an error.
func NewRateTable(source string, at int64, rates ...money.Rate) (*RateTable, error) {
	out := make([]SourcedRate, len(rates))
	for i, r := range rates {
		out[i] = SourcedRate{Rate: r, Source: source, At: at}
	}
	return NewSourcedRateTable(out...)
}

// NewSourcedRateTable checks and indexes rates, each with its own source
// and time; a duplicate pair or a rate without a source is an error.
func NewSourcedRateTable(rates ...SourcedRate) (*RateTable, error) {
	t := &RateTable{rates: map[string]SourcedRate{}}
	for _, r := range rates {
		if _, err := r.Convert(money.Amount{Currency: r.From}); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		k := r.From + "->" + r.To
		if r.Source == "" {
			return nil, fmt.Errorf("%w: rate %s has no source: say who stated it", ErrBadRequest, k)
		}
		if _, dup := t.rates[k]; dup {
			return nil, fmt.Errorf("%w: rate %s given twice", ErrBadRequest, k)
		}
		t.rates[k] = r
	}
	return t, nil
}

// Len is the number of rates.
func (t *RateTable) Len() int {
	if t == nil {
		return 0
	}
	return len(t.rates)
}

func (t *RateTable) lookup(from, to string) (SourcedRate, bool) {
	if t == nil {
		return SourcedRate{}, false
	}
	r, ok := t.rates[from+"->"+to]
	return r, ok
}

// oracle is r as seed 003's OracleConversionEvidence.
func (r SourcedRate) oracle() *receipt.OracleEvidence {
	return receipt.EvidenceFor(r.Rate, r.Source, r.At)
}

// evidence is r as a receipt evidence entry: the rate, its source and time,
// and the rates file it came from, so a reader can check the conversion
// against the file.
func (t *RateTable) evidence(r SourcedRate) receipt.Evidence {
	d := fmt.Sprintf("%s->%s = %d/%d + %d bps, stated by %s at %s", r.From, r.To, r.Numerator, r.Denominator, r.MarginBPS,
		r.Source, time.Unix(r.At, 0).UTC().Format(time.RFC3339))
	if t.File != "" {
		d += fmt.Sprintf(" (rates file %s sha256:%s)", t.File, t.FileSHA256)
	}
	return receipt.Evidence{GuardName: EvidenceRate, Verdict: true, Details: d}
}

// EvidenceRate is the guard_name of a receipt's exchange-rate evidence.
const EvidenceRate = "exchange-rate"
