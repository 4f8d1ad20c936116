package money

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in    string
		units uint64
		cur   string
		err   error
	}{
		{"12.34 USD", 1234, "USD", nil},
		{"USD 12.34", 1234, "USD", nil},
		{"0.5 USD", 50, "USD", nil},
		{"5 USD", 500, "USD", nil},
		{"1.50 JPY", 0, "", ErrPrecision},
		{"150 JPY", 150, "JPY", nil},
		{"0.000001 USDC", 1, "USDC", nil},
		{"1 ETH", 1000000000000000000, "ETH", nil},
		{"19 ETH", 0, "", ErrOverflow},
		{"0.123 USD", 0, "", ErrPrecision},
		{"0.120 USD", 12, "USD", nil},
		{"1e3 USD", 0, "", ErrSyntax},
		{"-1 USD", 0, "", ErrSyntax},
		{".5 USD", 0, "", ErrSyntax},
		{"5. USD", 0, "", ErrSyntax},
		{"5 XXX", 0, "", ErrUnknownCurrency},
		{"5", 0, "", ErrSyntax},
	} {
		a, err := Parse(tc.in)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("Parse(%q) err = %v, want %v", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || a.Units != tc.units || a.Currency != tc.cur {
			t.Errorf("Parse(%q) = %+v, %v; want %d %s", tc.in, a, err, tc.units, tc.cur)
		}
	}
}

func TestStringRoundTrip(t *testing.T) {
	for _, a := range []Amount{{1234, "USD"}, {5, "USD"}, {0, "EUR"}, {150, "JPY"}, {1, "USDC"}, {123456789, "BTC"}} {
		b, err := Parse(a.String())
		if err != nil || b != a {
			t.Errorf("round trip %v -> %q -> %v, %v", a, a.String(), b, err)
		}
	}
	if got := (Amount{5, "USD"}).String(); got != "0.05 USD" {
		t.Errorf("String = %q", got)
	}
}

func TestArithmetic(t *testing.T) {
	usd := func(u uint64) Amount { return Amount{u, "USD"} }
	if s, err := usd(5).Add(usd(7)); err != nil || s.Units != 12 {
		t.Fatalf("Add = %v, %v", s, err)
	}
	if _, err := usd(^uint64(0)).Add(usd(1)); !errors.Is(err, ErrOverflow) {
		t.Fatalf("overflow not detected: %v", err)
	}
	if _, err := usd(1).Sub(usd(2)); !errors.Is(err, ErrOverflow) {
		t.Fatalf("negative not detected: %v", err)
	}
	if _, err := usd(1).Add(Amount{1, "EUR"}); !errors.Is(err, ErrCurrencyMismatch) {
		t.Fatalf("mismatch not detected: %v", err)
	}
	if c, _ := usd(1).Cmp(usd(2)); c != -1 {
		t.Fatalf("Cmp = %d", c)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"12.34 USD", "0 JPY", "1.000000000000000001 ETH", "USD 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := Parse(s)
		if err != nil {
			return
		}
		b, err := Parse(a.String())
		if err != nil || a != b {
			t.Fatalf("%q parsed to %v but its rendering %q parsed to %v, %v", s, a, a.String(), b, err)
		}
	})
}

func TestReportedUnits(t *testing.T) {
	for _, tc := range []struct {
		text, cur string
		units     uint64
		exact     bool
		err       error
	}{
		{"0.02", "USD", 2, true, nil},
		{"0.00002", "USD", 1, false, nil}, // rounded up: never under-counted
		{"2e-05", "USD", 1, false, nil},
		{"2E-05", "USDC", 20, true, nil},
		{"0.00002", "USDC", 20, true, nil},
		{"1.5e2", "JPY", 150, true, nil},
		{"0", "USD", 0, true, nil},
		{"0.1", "USD", 10, true, nil}, // not 0.1000000000000000055...
		{"-1", "USD", 0, false, ErrSyntax},
		{"1e999999999", "USD", 0, false, ErrSyntax},
		{".5", "USD", 0, false, ErrSyntax},
		{"1e30", "USD", 0, false, ErrOverflow},
		{"1", "XAU", 0, false, ErrUnknownCurrency},
	} {
		u, exact, err := ReportedUnits(tc.text, tc.cur)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("ReportedUnits(%s, %s) err = %v; want %v", tc.text, tc.cur, err, tc.err)
			}
			continue
		}
		if err != nil || u != tc.units || exact != tc.exact {
			t.Errorf("ReportedUnits(%s, %s) = %d, %v, %v; want %d, %v", tc.text, tc.cur, u, exact, err, tc.units, tc.exact)
		}
	}
}
