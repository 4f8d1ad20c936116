package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/klocklabs/klock/policy/money"
	"go.yaml.in/yaml/v3"
)

// KCC writes money as bare decimals (max_cost_usd: 2.00, cost_per_invocation:
// 0.01). A float64 cannot hold 0.01, so such a value is never read as a
// number: its decimal text, exactly as written in the YAML scalar, is
// converted to integer minor units, and a value with more fractional digits
// than the currency has is refused rather than rounded.

// DecimalError is a YAML scalar that is not an exact amount of its currency.
// It wraps money.ErrSyntax, money.ErrPrecision or money.ErrOverflow.
type DecimalError struct {
	Text     string // the scalar as written
	Currency string
	Err      error
}

func (e *DecimalError) Error() string {
	return fmt.Sprintf("%q is not an exact %s amount: %v", e.Text, e.Currency, e.Err)
}

func (e *DecimalError) Unwrap() error { return e.Err }

// Want says what to write instead, for a diagnostic.
func (e *DecimalError) Want() string {
	exp, _ := money.Exponent(e.Currency)
	switch {
	case errors.Is(e.Err, money.ErrPrecision):
		return fmt.Sprintf("write at most %d decimal places (%s's minor unit): money is never rounded", exp, e.Currency)
	case errors.Is(e.Err, money.ErrOverflow):
		return "use an amount that fits in 64-bit minor units"
	}
	return fmt.Sprintf("write a plain decimal such as 2.00: digits, an optional point and at most %d decimals (no sign, exponent, '_' or hex)", exp)
}

// DecimalUnits reads the decimal text of a YAML scalar (2, 2.00 or "2.00")
// as minor units of cur, exactly. Only the scalar's text is used: YAML's
// number forms that are not plain decimals (1e3, 0x10, .5, +1, .inf, 1_000)
// are refused, since they are not what a reader of the manifest sees as an
// amount, or not exact.
func DecimalUnits(n *yaml.Node, cur string) (uint64, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, &DecimalError{Text: kindName(n), Currency: cur, Err: money.ErrSyntax}
	}
	switch n.ShortTag() {
	case "!!int", "!!float", "!!str":
	default:
		return 0, &DecimalError{Text: n.Value, Currency: cur, Err: money.ErrSyntax}
	}
	text := strings.TrimSpace(n.Value)
	u, err := money.ParseUnits(text, cur)
	if err != nil {
		return 0, &DecimalError{Text: n.Value, Currency: cur, Err: err}
	}
	return u, nil
}

// failDecimal reports err from DecimalUnits at n.
func (d *decoder) failDecimal(n *yaml.Node, path string, err error) {
	var de *DecimalError
	if !errors.As(err, &de) {
		d.fail(n, path, "money", "", "%v", err)
		return
	}
	code := "money"
	if errors.Is(err, money.ErrPrecision) {
		code = "money-precision"
	}
	d.fail(n, path, code, de.Want(), "%v", de)
}

// USDDecimal is one of KCC's *_usd fields: a bare decimal of US dollars,
// kept as integer cents.
type USDDecimal struct{ Money }

func (u *USDDecimal) decodeNode(d *decoder, n *yaml.Node, path string) {
	units, err := DecimalUnits(n, "USD")
	if err != nil {
		d.failDecimal(n, path, err)
		return
	}
	u.Amount = money.Amount{Units: units, Currency: "USD"}
}
