package budget

import (
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

// A tool that reports its cost in a currency the rate
// table cannot convert must not leave its hold open (money neither settled
// nor released): the hold settles at the reserved worst case, and the
// receipt says so and why.
func TestReconcileWithoutRateSettlesAtTheReservation(t *testing.T) {
	f := newFixture(t)
	s := f.open(t)
	g := Grant{Key: Key{"c", 0}, Tool: "t", Limits: Limits{Currency: "USD", PerInvocation: u(50), Total: u(1000)}}
	if err := s.Define(ctx, g); err != nil {
		t.Fatal(err)
	}
	h, err := s.Reserve(ctx, Request{Key: g.Key})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Reconcile(ctx, h.ID, Settle{Actual: money.Amount{Units: 7, Currency: "EUR"}})
	if err != nil {
		t.Fatalf("reconcile without a EUR->USD rate: %v (the hold must settle at its reservation)", err)
	}
	if st.Charged != usd(50) || st.Credit != 0 || st.Status != receipt.Settled {
		t.Fatalf("settlement %+v; want the reserved 0.50 USD, settled", st)
	}
	fin := st.Receipt.Metadata.Financial
	if fin.Extra[ExtraSettledAt] != SettledAtReservation || !strings.Contains(fin.Extra[ExtraSettledWhy], "EUR->USD") {
		t.Fatalf("receipt not marked as settled at the worst case: %+v", fin.Extra)
	}
	if fin.OriginalCost == nil || fin.OriginalCost.Currency != "EUR" || fin.OriginalCost.Units != 7 {
		t.Fatalf("the reported cost is not recorded: %+v", fin.OriginalCost)
	}
	us, err := s.Usage(ctx, g.Key)
	if err != nil || us.OpenHolds != 0 || us.Charged != usd(50) {
		t.Fatalf("usage %+v %v; want no open hold, 0.50 USD charged", us, err)
	}
	s.Close()
	charged, _, _ := f.ledgerFromReceipts(t)
	if charged[g.Key] != 50 {
		t.Fatalf("receipts sum to %d, want 50", charged[g.Key])
	}
}
