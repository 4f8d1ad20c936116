package mcpproxy

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/costreport"
	"github.com/klocklabs/klock/policy/money"
)

// usageOf reads the cost a server reported for one call in the result's
// _meta (MCP's place for what is not the tool's output):
//
//	"_meta": {"cost": {"units": 12, "currency": "USD"}, "tokens_used": 40}
//
// or "cost": "0.12 USD". A cost that is absent or cannot be read is not
// known (the reservation stands, with the reason): never guessed.
func usageOf(result json.RawMessage) check.Usage {
	var r struct {
		Meta struct {
			Cost       json.RawMessage `json:"cost"`
			TokensUsed int64           `json:"tokens_used"`
		} `json:"_meta"`
	}
	if json.Unmarshal(result, &r) != nil || len(r.Meta.Cost) == 0 || string(r.Meta.Cost) == "null" {
		return check.Usage{TokensUsed: max(r.Meta.TokensUsed, 0)}
	}
	u := check.Usage{TokensUsed: max(r.Meta.TokensUsed, 0)}
	amt, err := readCost(r.Meta.Cost)
	if err != nil {
		u.Reason = fmt.Sprintf("the server reported a cost klock cannot read (%v); the reservation stays charged", err)
		return u
	}
	u.CostUnits, u.Currency, u.Known = amt.Units, amt.Currency, true
	u.ReportedBy = "the MCP server's result _meta.cost"
	// Seed 003's ToolInvocationCost may itemize: {"units", "currency",
	// "breakdown"}; the call is charged the breakdown's sum.
	var withBreakdown struct {
		Breakdown json.RawMessage `json:"breakdown"`
	}
	if json.Unmarshal(r.Meta.Cost, &withBreakdown) == nil && len(withBreakdown.Breakdown) > 0 && string(withBreakdown.Breakdown) != "null" {
		sum, err := costreport.Total(&amt, withBreakdown.Breakdown)
		if err != nil {
			return check.Usage{TokensUsed: u.TokensUsed, Reason: fmt.Sprintf("the server reported a cost klock cannot read (%v); the reservation stays charged", err)}
		}
		var c bytes.Buffer
		_ = json.Compact(&c, withBreakdown.Breakdown)
		u.CostUnits, u.Breakdown = sum.Units, c.Bytes()
	}
	return u
}

func readCost(raw json.RawMessage) (money.Amount, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return money.Parse(s)
	}
	var a struct {
		Units     *uint64         `json:"units"`
		Currency  string          `json:"currency"`
		Breakdown json.RawMessage `json:"breakdown"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || a.Units == nil {
		return money.Amount{}, fmt.Errorf(`want {"units": N, "currency": "USD"} or "0.12 USD", got %s`, raw)
	}
	return money.New(*a.Units, a.Currency)
}
