package money

import (
	"errors"
	"math/big"
	"testing"
)

func TestRateConvert(t *testing.T) {
	for _, tc := range []struct {
		r    Rate
		in   Amount
		want Amount
		err  error
	}{
		// 1 USDC = 1 USD: 1.500000 USDC -> 150 cents.
		{Rate{"USDC", "USD", 1, 1, 0}, Amount{1_500_000, "USDC"}, Amount{150, "USD"}, nil},
		// Rounding up: 1 micro-USDC is still one cent of budget.
		{Rate{"USDC", "USD", 1, 1, 0}, Amount{1, "USDC"}, Amount{1, "USD"}, nil},
		// 50 bp margin on 10.00 EUR at 1.08 USD/EUR: 1080 * 1.005 = 1085.4 -> 1086.
		{Rate{"EUR", "USD", 108, 100, 50}, Amount{1000, "EUR"}, Amount{1086, "USD"}, nil},
		// JPY (exponent 0) to USD: 150 JPY at 1/150 -> 1.00 USD exactly.
		{Rate{"JPY", "USD", 1, 150, 0}, Amount{150, "JPY"}, Amount{100, "USD"}, nil},
		{Rate{"EUR", "USD", 0, 1, 0}, Amount{1, "EUR"}, Amount{}, ErrRate},
		{Rate{"EUR", "USD", 1, 1, 0}, Amount{1, "GBP"}, Amount{}, ErrCurrencyMismatch},
		{Rate{"BTC", "ETH", 1 << 60, 1, 0}, Amount{1 << 40, "BTC"}, Amount{}, ErrOverflow},
	} {
		got, err := tc.r.Convert(tc.in)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%+v.Convert(%v) err = %v, want %v", tc.r, tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v.Convert(%v) = %v, %v; want %v", tc.r, tc.in, got, err, tc.want)
		}
	}
}

func TestFromMicros(t *testing.T) {
	for _, tc := range []struct {
		micros int64
		cur    string
		want   uint64
	}{
		{10_000, "USD", 1}, {10_001, "USD", 2}, {0, "USD", 0}, {1, "USD", 1},
		{7, "USDC", 7}, {3, "ETH", 3_000_000_000_000}, {1, "JPY", 1},
	} {
		got, err := FromMicros(big.NewInt(tc.micros), tc.cur)
		if err != nil || got.Units != tc.want {
			t.Errorf("FromMicros(%d, %s) = %v, %v; want %d", tc.micros, tc.cur, got, err, tc.want)
		}
	}
}
