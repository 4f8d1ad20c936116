package money

import (
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
)

// Sentinel errors; wrapped with %w so callers can test with errors.Is.
var (
	ErrUnknownCurrency  = errors.New("unknown currency")
	ErrPrecision        = errors.New("more decimal places than the currency has minor units")
	ErrSyntax           = errors.New("not a decimal amount")
	ErrOverflow         = errors.New("amount out of range")
	ErrCurrencyMismatch = errors.New("currencies differ")
)

//go:generate go run gen_currencies.go

// Exponent reports how many decimal digits the currency's minor unit has:
// ISO 4217's minor unit for an ISO code (currencies.txt), seed 003's for a
// crypto unit. An unknown code is refused with the nearest known one, a code
// ISO gives no minor unit (XAU, XDR, XXX) by name.
func Exponent(currency string) (int, error) {
	if e, ok := exponents[currency]; ok {
		return e, nil
	}
	if name, ok := noMinorUnit[currency]; ok {
		return 0, fmt.Errorf("%w %q (%s): ISO 4217 gives it no minor unit, so its amounts cannot be counted in integer minor units; use a currency that has one", ErrUnknownCurrency, currency, name)
	}
	if up := strings.ToUpper(currency); up != currency {
		if _, ok := exponents[up]; ok {
			return 0, fmt.Errorf("%w %q: currency codes are upper case: write %s", ErrUnknownCurrency, currency, up)
		}
	}
	return 0, fmt.Errorf("%w %q: write an ISO 4217 code (USD, EUR, JPY, KWD, ...) or one of the crypto units USDC, USDT, BTC, ETH", ErrUnknownCurrency, currency)
}

// Currencies lists the known currency codes, sorted.
func Currencies() []string {
	out := make([]string, 0, len(exponents))
	for c := range exponents {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Amount is money as integer minor units of one currency.
type Amount struct {
	Units    uint64 `json:"units" yaml:"units"`
	Currency string `json:"currency" yaml:"currency"`
}

// New returns an Amount after checking the currency is known.
func New(units uint64, currency string) (Amount, error) {
	if _, err := Exponent(currency); err != nil {
		return Amount{}, err
	}
	return Amount{Units: units, Currency: currency}, nil
}

// Parse reads "12.34 USD" (or "USD 12.34") exactly.
func Parse(s string) (Amount, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return Amount{}, fmt.Errorf("%w: %q: want \"<decimal> <CURRENCY>\", e.g. \"12.34 USD\"", ErrSyntax, s)
	}
	num, cur := f[0], f[1]
	if _, err := Exponent(cur); err != nil {
		if _, err2 := Exponent(num); err2 == nil {
			num, cur = cur, num
		} else {
			return Amount{}, err
		}
	}
	u, err := ParseUnits(num, cur)
	if err != nil {
		return Amount{}, err
	}
	return Amount{Units: u, Currency: cur}, nil
}

// ParseUnits converts a non-negative decimal string into minor units of cur.
func ParseUnits(dec, cur string) (uint64, error) {
	exp, err := Exponent(cur)
	if err != nil {
		return 0, err
	}
	if dec == "" {
		return 0, fmt.Errorf("%w: empty", ErrSyntax)
	}
	whole, frac, hasDot := strings.Cut(dec, ".")
	if whole == "" || (hasDot && frac == "") || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("%w: %q: want digits with an optional '.' and fraction, e.g. 12.34", ErrSyntax, dec)
	}
	if len(frac) > exp {
		trimmed := strings.TrimRight(frac, "0")
		if len(trimmed) > exp {
			return 0, fmt.Errorf("%w: %s %s has %d decimal places, %s has %d", ErrPrecision, dec, cur, len(trimmed), cur, exp)
		}
		frac = trimmed
	}
	frac += strings.Repeat("0", exp-len(frac))
	n, ok := new(big.Int).SetString(whole+frac, 10)
	if !ok || !n.IsUint64() {
		return 0, fmt.Errorf("%w: %s %s does not fit in 64-bit minor units", ErrOverflow, dec, cur)
	}
	return n.Uint64(), nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String renders the amount as an exact decimal with its currency: "12.34 USD".
func (a Amount) String() string {
	exp, ok := exponents[a.Currency]
	if !ok {
		return fmt.Sprintf("%d minor units %s", a.Units, a.Currency)
	}
	s := fmt.Sprintf("%0*d", exp+1, a.Units)
	if exp == 0 {
		return s + " " + a.Currency
	}
	return s[:len(s)-exp] + "." + s[len(s)-exp:] + " " + a.Currency
}

// Add returns a+b, refusing currency mismatch and overflow.
func (a Amount) Add(b Amount) (Amount, error) {
	if a.Currency != b.Currency {
		return Amount{}, fmt.Errorf("%w: %s + %s", ErrCurrencyMismatch, a.Currency, b.Currency)
	}
	s := a.Units + b.Units
	if s < a.Units {
		return Amount{}, fmt.Errorf("%w: %s + %s overflows", ErrOverflow, a, b)
	}
	return Amount{Units: s, Currency: a.Currency}, nil
}

// Sub returns a-b, refusing currency mismatch and negative results.
func (a Amount) Sub(b Amount) (Amount, error) {
	if a.Currency != b.Currency {
		return Amount{}, fmt.Errorf("%w: %s - %s", ErrCurrencyMismatch, a.Currency, b.Currency)
	}
	if b.Units > a.Units {
		return Amount{}, fmt.Errorf("%w: %s - %s is negative", ErrOverflow, a, b)
	}
	return Amount{Units: a.Units - b.Units, Currency: a.Currency}, nil
}

// Cmp compares two amounts of the same currency: -1, 0 or +1.
func (a Amount) Cmp(b Amount) (int, error) {
	if a.Currency != b.Currency {
		return 0, fmt.Errorf("%w: %s vs %s", ErrCurrencyMismatch, a.Currency, b.Currency)
	}
	switch {
	case a.Units < b.Units:
		return -1, nil
	case a.Units > b.Units:
		return 1, nil
	}
	return 0, nil
}
