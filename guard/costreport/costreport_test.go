package costreport

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/klocklabs/klock/policy/money"
)

func TestBreakdownIsChargedAsItsSum(t *testing.T) {
	usd := func(u uint64) *money.Amount { return &money.Amount{Units: u, Currency: "USD"} }
	for _, tc := range []struct {
		total     *money.Amount
		breakdown string
		want      *money.Amount
		bad       bool
	}{
		// Seed 003's example: minor units of the total's currency.
		{total: usd(150), breakdown: `{"compute": 120, "io": 30}`, want: usd(150)},
		{breakdown: `{"compute": "1.20 USD", "io": {"units": 30, "currency": "USD"}}`, want: usd(150)},
		{total: usd(100), breakdown: `{"compute": 120, "io": 30}`, bad: true}, // does not add up
		{breakdown: `{"compute": 120}`, bad: true},                            // units of what?
		{breakdown: `{"a": "1 USD", "b": "1 EUR"}`, bad: true},
		{breakdown: `{"a": 1.5}`, total: usd(1), bad: true},
		{breakdown: `{"a": -1}`, total: usd(1), bad: true},
		{breakdown: `{}`, bad: true},
		{breakdown: `[1]`, bad: true},
		{total: usd(7), want: usd(7)},
	} {
		got, err := Total(tc.total, json.RawMessage(tc.breakdown))
		if tc.bad {
			if !errors.Is(err, ErrCost) {
				t.Errorf("%s (total %v): %v, %v; want ErrCost", tc.breakdown, tc.total, got, err)
			}
			continue
		}
		if err != nil || got == nil || *got != *tc.want {
			t.Errorf("%s (total %v): %v, %v; want %v", tc.breakdown, tc.total, got, err, tc.want)
		}
	}
}
