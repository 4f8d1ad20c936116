package money

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// A cost reported by a tool arrives as a JSON number: 0.00002, or 2e-05
// when the tool's JSON encoder prefers exponents (Python's and Go's do for
// small values). Its text is exact; a float64 of it is not. ReportedUnits
// reads the text as a rational number, never a float.

// maxExponent bounds a number's decimal exponent: no cost needs more, and
// 1e999999999 must not make big.Rat allocate for it.
const maxExponent = 64

// ReportedUnits converts the decimal text of a reported cost (digits, an
// optional fraction, an optional exponent: JSON's number grammar, without
// a sign) into minor units of cur, rounded up to the next minor unit: a
// budget never under-counts what was spent. exact is false when rounding
// changed the value, so the caller can say so.
func ReportedUnits(text, cur string) (units uint64, exact bool, err error) {
	exp, err := Exponent(cur)
	if err != nil {
		return 0, false, err
	}
	if text == "" || len(text) > 64 || strings.HasPrefix(text, "-") || strings.HasPrefix(text, "+") {
		return 0, false, fmt.Errorf("%w: %q: want a non-negative decimal such as 0.02 or 2e-05", ErrSyntax, text)
	}
	mant, e, hasExp := strings.Cut(strings.ToLower(text), "e")
	whole, frac, hasDot := strings.Cut(mant, ".")
	if whole == "" || hasDot && frac == "" || !digits(whole) || !digits(frac) {
		return 0, false, fmt.Errorf("%w: %q: want a non-negative decimal such as 0.02 or 2e-05", ErrSyntax, text)
	}
	if hasExp {
		n, perr := strconv.Atoi(strings.TrimPrefix(e, "+"))
		if perr != nil || n > maxExponent || n < -maxExponent {
			return 0, false, fmt.Errorf("%w: %q: the exponent must be an integer within ±%d", ErrSyntax, text, maxExponent)
		}
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return 0, false, fmt.Errorf("%w: %q", ErrSyntax, text)
	}
	r.Mul(r, new(big.Rat).SetInt(pow10(exp)))
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	exact = m.Sign() == 0
	if !exact {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsUint64() {
		return 0, false, fmt.Errorf("%w: %s %s does not fit in 64-bit minor units", ErrOverflow, text, cur)
	}
	return q.Uint64(), exact, nil
}
