package costreport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/klocklabs/klock/policy/money"
)

// ErrCost: a reported cost or breakdown cannot be read.
var ErrCost = errors.New("unreadable reported cost")

// MaxItems bounds a breakdown (it is copied into every receipt).
const MaxItems = 64

// Forms names what Amount accepts, for error messages.
const Forms = `"0.12 USD" or {"units": 12, "currency": "USD"}`

// Amount reads one amount in either form.
func Amount(raw json.RawMessage) (money.Amount, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		a, err := money.Parse(s)
		if err != nil {
			return money.Amount{}, fmt.Errorf("%w: %v (want %s)", ErrCost, err, Forms)
		}
		return a, nil
	}
	var a struct {
		Units    *uint64 `json:"units"`
		Currency string  `json:"currency"`
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&a); err != nil || a.Units == nil {
		return money.Amount{}, fmt.Errorf("%w: want %s, got %s", ErrCost, Forms, raw)
	}
	amt, err := money.New(*a.Units, a.Currency)
	if err != nil {
		return money.Amount{}, fmt.Errorf("%w: %v", ErrCost, err)
	}
	return amt, nil
}

// Breakdown reads a breakdown and returns its sum. An item is an amount in
// either form, or a bare non-negative integer of minor units of currency
// (the total's currency, as in seed 003's {"compute": 120, "io": 30}); a
// bare integer with no currency known is an error. Every item must be in
// one currency.
func Breakdown(raw json.RawMessage, currency string) (money.Amount, error) {
	var items map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&items); err != nil || items == nil {
		return money.Amount{}, fmt.Errorf("%w: breakdown: want an object of named amounts, e.g. {\"compute\": \"0.10 USD\", \"io\": \"0.02 USD\"}", ErrCost)
	}
	if len(items) == 0 || len(items) > MaxItems {
		return money.Amount{}, fmt.Errorf("%w: breakdown has %d items; give 1 to %d", ErrCost, len(items), MaxItems)
	}
	keys := make([]string, 0, len(items))
	for k := range items {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sum := money.Amount{Currency: currency}
	for _, k := range keys {
		if k == "" || len(k) > 64 {
			return money.Amount{}, fmt.Errorf("%w: breakdown item %q: name items with 1 to 64 characters", ErrCost, k)
		}
		a, err := item(items[k], currency)
		if err != nil {
			return money.Amount{}, fmt.Errorf("breakdown item %q: %w", k, err)
		}
		if sum.Currency == "" {
			sum.Currency = a.Currency
		}
		if a.Currency != sum.Currency {
			return money.Amount{}, fmt.Errorf("%w: breakdown item %q is in %s, the others in %s: itemize in one currency", ErrCost, k, a.Currency, sum.Currency)
		}
		if sum.Units+a.Units < sum.Units {
			return money.Amount{}, fmt.Errorf("%w: breakdown overflows at item %q", ErrCost, k)
		}
		sum.Units += a.Units
	}
	return sum, nil
}

func item(raw json.RawMessage, currency string) (money.Amount, error) {
	t := strings.TrimSpace(string(raw))
	if t != "" && (t[0] >= '0' && t[0] <= '9' || t[0] == '-') {
		var n json.Number
		_ = json.Unmarshal(raw, &n)
		var units uint64
		if _, err := fmt.Sscan(n.String(), &units); err != nil || strings.ContainsAny(t, ".eE-") {
			return money.Amount{}, fmt.Errorf("%w: %s is not a non-negative integer of minor units (or write %s)", ErrCost, t, Forms)
		}
		if currency == "" {
			return money.Amount{}, fmt.Errorf("%w: %s minor units of which currency? give the total cost too, or write %s", ErrCost, t, Forms)
		}
		return money.New(units, currency)
	}
	return Amount(raw)
}

// Total reconciles a reported total (nil: none) with a breakdown (nil:
// none): the cost charged is the breakdown's sum, and a total that
// disagrees with it is an error.
func Total(total *money.Amount, breakdown json.RawMessage) (*money.Amount, error) {
	if len(bytes.TrimSpace(breakdown)) == 0 || string(bytes.TrimSpace(breakdown)) == "null" {
		return total, nil
	}
	cur := ""
	if total != nil {
		cur = total.Currency
	}
	sum, err := Breakdown(breakdown, cur)
	if err != nil {
		return nil, err
	}
	if total != nil && *total != sum {
		return nil, fmt.Errorf("%w: the breakdown sums to %s but the cost says %s: send a breakdown that adds up to the cost, or leave the cost out", ErrCost, sum, total)
	}
	return &sum, nil
}
