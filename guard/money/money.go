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

// exponents is the number of minor-unit digits per currency (seed 003's table,
// plus the common ISO 4217 currencies an operator is likely to write).
var exponents = map[string]int{
	"USD": 2, "EUR": 2, "GBP": 2, "CHF": 2, "CAD": 2, "AUD": 2, "CNY": 2,
	"INR": 2, "UAH": 2, "SEK": 2, "NOK": 2, "DKK": 2, "PLN": 2, "BRL": 2,
	"JPY": 0, "KRW": 0,
	"USDC": 6, "USDT": 6,
	"BTC": 8,
	"ETH": 18,
}

// Exponent reports how many decimal digits the currency's minor unit has.
func Exponent(currency string) (int, error) {
	e, ok := exponents[currency]
	if !ok {
		return 0, fmt.Errorf("%w %q (known: %s)", ErrUnknownCurrency, currency, strings.Join(Currencies(), ", "))
	}
	return e, nil
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
