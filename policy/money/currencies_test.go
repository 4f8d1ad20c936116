package money

import (
	"errors"
	"testing"
)

// The exponents ISO 4217 gives, and a sample of each class: a mistake here
// mis-scales every amount in that currency by a power of ten.
func TestISO4217Exponents(t *testing.T) {
	want := map[string]int{
		"USD": 2, "EUR": 2, "GBP": 2, "CHF": 2, "UAH": 2, "CNY": 2, "INR": 2, "BRL": 2, "MXN": 2,
		"JPY": 0, "KRW": 0, "CLP": 0, "ISK": 0, "VND": 0, "XOF": 0, "XAF": 0, "XPF": 0, "PYG": 0,
		"UGX": 0, "RWF": 0, "BIF": 0, "DJF": 0, "GNF": 0, "KMF": 0, "VUV": 0, "UYI": 0,
		"KWD": 3, "BHD": 3, "JOD": 3, "OMR": 3, "TND": 3, "LYD": 3, "IQD": 3,
		"CLF": 4, "UYW": 4,
		"MGA": 2, "MRU": 2, "IDR": 2, "HUF": 2, "TWD": 2, "XCG": 2, "ZWG": 2,
		// Seed 003's crypto units.
		"USDC": 6, "USDT": 6, "BTC": 8, "ETH": 18,
	}
	for c, e := range want {
		got, err := Exponent(c)
		if err != nil || got != e {
			t.Errorf("Exponent(%s) = %d, %v; want %d", c, got, err, e)
		}
	}
	iso := 0
	for _, c := range Currencies() {
		if len(c) == 3 && c != "BTC" && c != "ETH" {
			iso++
		}
	}
	// ISO 4217 list one has about 170 codes with a minor unit.
	if iso < 165 {
		t.Errorf("only %d ISO 4217 currencies known; the full table has ~170", iso)
	}
}

// A code ISO gives no minor unit (gold, SDR, "no currency") is refused by
// name: its amounts cannot be integer minor units.
func TestNoMinorUnit(t *testing.T) {
	for _, c := range []string{"XAU", "XDR", "XXX", "XTS"} {
		_, err := Exponent(c)
		if !errors.Is(err, ErrUnknownCurrency) || !contains(err.Error(), "no minor unit") {
			t.Errorf("Exponent(%s) err = %v; want ErrUnknownCurrency saying it has no minor unit", c, err)
		}
	}
	if _, err := Parse("1.000 KWD"); err != nil {
		t.Errorf("Parse(1.000 KWD): %v", err)
	}
	if _, err := Parse("1.0001 KWD"); !errors.Is(err, ErrPrecision) {
		t.Errorf("Parse(1.0001 KWD) err = %v; want ErrPrecision", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
