package money

import (
	"errors"
	"fmt"
	"math/big"
)

// ErrRate is returned for a conversion rate that cannot be used.
var ErrRate = errors.New("unusable conversion rate")

// Rate converts one currency into another with integers only: one major
// unit of From is worth Numerator/Denominator major units of To. A margin in
// basis points (1 bp = 0.01 %) is added on top, because a budget reserved
// in one currency and settled in another must hold even if the rate moves
// in between.
type Rate struct {
	From        string `json:"from_currency" yaml:"from"`
	To          string `json:"to_currency" yaml:"to"`
	Numerator   uint64 `json:"rate_numerator" yaml:"numerator"`
	Denominator uint64 `json:"rate_denominator" yaml:"denominator"`
	MarginBPS   uint32 `json:"margin_bps" yaml:"margin_bps"`
}

// Convert returns a in r.To, rounded up to the next minor unit: a budget
// never under-counts what was spent, so every rounding favours the budget.
func (r Rate) Convert(a Amount) (Amount, error) {
	if a.Currency != r.From {
		return Amount{}, fmt.Errorf("%w: rate %s->%s applied to %s", ErrCurrencyMismatch, r.From, r.To, a)
	}
	if r.Numerator == 0 || r.Denominator == 0 {
		return Amount{}, fmt.Errorf("%w: %s->%s has a zero numerator or denominator", ErrRate, r.From, r.To)
	}
	ef, err := Exponent(r.From)
	if err != nil {
		return Amount{}, err
	}
	et, err := Exponent(r.To)
	if err != nil {
		return Amount{}, err
	}
	// to_units = from_units * num * 10^et * (10000+margin)
	//          / (den * 10^ef * 10000), rounded up.
	num := new(big.Int).SetUint64(a.Units)
	num.Mul(num, new(big.Int).SetUint64(r.Numerator))
	num.Mul(num, pow10(et))
	num.Mul(num, big.NewInt(10000+int64(r.MarginBPS)))
	den := new(big.Int).SetUint64(r.Denominator)
	den.Mul(den, pow10(ef))
	den.Mul(den, big.NewInt(10000))
	u, err := divCeil(num, den)
	if err != nil {
		return Amount{}, fmt.Errorf("%w: %s in %s", err, a, r.To)
	}
	return Amount{Units: u, Currency: r.To}, nil
}

// FromMicros converts a count of micro-units (10^-6 of the currency's major
// unit, the unit model price tables use) into minor units, rounded up.
func FromMicros(micros *big.Int, currency string) (Amount, error) {
	exp, err := Exponent(currency)
	if err != nil {
		return Amount{}, err
	}
	if micros.Sign() < 0 {
		return Amount{}, fmt.Errorf("%w: negative micro-units", ErrOverflow)
	}
	var u uint64
	if exp >= 6 {
		n := new(big.Int).Mul(micros, pow10(exp-6))
		if !n.IsUint64() {
			return Amount{}, fmt.Errorf("%w: %s micro-%s", ErrOverflow, micros, currency)
		}
		u = n.Uint64()
	} else if u, err = divCeil(micros, pow10(6-exp)); err != nil {
		return Amount{}, fmt.Errorf("%w: %s micro-%s", err, micros, currency)
	}
	return Amount{Units: u, Currency: currency}, nil
}

func pow10(n int) *big.Int { return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil) }

func divCeil(num, den *big.Int) (uint64, error) {
	q, m := new(big.Int).QuoRem(num, den, new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsUint64() {
		return 0, ErrOverflow
	}
	return q.Uint64(), nil
}
