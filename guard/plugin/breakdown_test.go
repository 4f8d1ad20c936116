package plugin

import (
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy/money"
)

// A plugin may itemize its cost; it is charged the sum and
// the breakdown is kept for the receipt.
func TestPluginBreakdownIsChargedAsItsSum(t *testing.T) {
	r, err := parseAnswer([]byte(`{"output": 1, "breakdown": {"compute": "0.12 USD", "io": {"units": 3, "currency": "USD"}}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Cost == nil || *r.Cost != (money.Amount{Units: 15, Currency: "USD"}) || !strings.Contains(string(r.Breakdown), `"compute":"0.12 USD"`) {
		t.Fatalf("cost %v breakdown %s", r.Cost, r.Breakdown)
	}
	// Seed 003's form: minor units of the stated cost's currency.
	r, err = parseAnswer([]byte(`{"output": 1, "cost": "1.50 USD", "breakdown": {"compute": 120, "io": 30}}`), "")
	if err != nil || *r.Cost != (money.Amount{Units: 150, Currency: "USD"}) {
		t.Fatalf("seed form: %+v %v", r, err)
	}
	// A breakdown that does not add up to the cost is refused.
	if _, err := parseAnswer([]byte(`{"output": 1, "cost": "1.00 USD", "breakdown": {"compute": 120, "io": 30}}`), ""); err == nil || !strings.Contains(err.Error(), "sums to") {
		t.Fatalf("inconsistent breakdown: %v", err)
	}
}
