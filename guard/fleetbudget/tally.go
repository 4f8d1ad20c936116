package fleetbudget

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/receipt"
)

// Tally sums receipt chains per grant: invocations (the receipts'
// invocation_delta) and charged units (ledger_debit - ledger_credit),
// which for a root grant equal its ledger's counters (package budget).
type Tally map[budget.Key]*Sum

// Sum is one grant's total over the receipts added.
type Sum struct{ Invocations, Units int64 }

// Add counts one receipt (those that move no money add nothing).
func (t Tally) Add(r *receipt.Receipt) {
	f := r.Metadata.Financial
	if f == nil {
		return
	}
	k := budget.Key{Capability: r.CapabilityID, Grant: f.GrantIndex}
	s := t[k]
	if s == nil {
		s = &Sum{}
		t[k] = s
	}
	s.Invocations += int64(f.InvocationDelta)
	s.Units += int64(f.LedgerDebit) - int64(f.LedgerCredit)
}

// Compare checks, for every grant of the fleet ledger, that the receipts
// add up to the members' usage as recorded in etcd, and that the usage is
// within the grant's limits. It returns one line per grant, and an error
// wrapping ErrMismatch naming every grant that does not add up. Grants
// the receipts charge but the fleet does not share (no limit) are listed
// as local.
func Compare(t Tally, fl map[budget.Key]*Record) ([]string, error) {
	var lines, bad []string
	keys := slices.SortedFunc(maps.Keys(fl), func(a, b budget.Key) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range keys {
		r := fl[k]
		inv, units := r.Used()
		s := t[k]
		if s == nil {
			s = &Sum{}
		}
		line := fmt.Sprintf("%s: %d members used %d invocations and %s; receipts: %d and %s", k, len(r.Members), inv, amt(units, r.Currency),
			s.Invocations, signed(s.Units, r.Currency))
		switch {
		case s.Invocations != int64(inv) || s.Units != int64(units):
			bad = append(bad, k.String())
			line += "  MISMATCH"
		case r.MaxInvocations != 0 && inv > r.MaxInvocations, r.MaxTotalCost != nil && units > *r.MaxTotalCost:
			line += "  OVER THE LIMIT (overruns tools reported after their calls)"
		}
		lines = append(lines, line)
	}
	for _, k := range slices.SortedFunc(maps.Keys(t), func(a, b budget.Key) int { return strings.Compare(a.String(), b.String()) }) {
		if fl[k] == nil {
			lines = append(lines, fmt.Sprintf("%s: not shared by the fleet (local grant); receipts: %d invocations, %d units", k, t[k].Invocations, t[k].Units))
		}
	}
	if len(bad) > 0 {
		return lines, fmt.Errorf("%w: %s (a member still running has not yet written its usage: stop its gateway, or wait for its idle block to return, and verify again; else a member's receipts are missing)",
			ErrMismatch, strings.Join(bad, ", "))
	}
	return lines, nil
}

func signed(u int64, cur string) string {
	if u < 0 {
		return "-" + amt(uint64(-u), cur)
	}
	return amt(uint64(u), cur)
}
