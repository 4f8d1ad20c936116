package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/klocklabs/klock/policy/money"
)

// Input is what the entry reads on stdin: the call, and the context seed
// 004 gives a plugin (run, team, capabilities) — never the user's session
// or messages.
type Input struct {
	Tool    string         `json:"tool"`
	Args    map[string]any `json:"args"`
	Context InputContext   `json:"context"`
}

// InputContext is the plugin's view of the call's context.
type InputContext struct {
	AgentRunID   string   `json:"agent_run_id,omitempty"`
	TeamID       string   `json:"team_id,omitempty"`
	Capabilities []string `json:"capabilities"`
	// ActsAs is the identity the tool's contract declares it acts as
	// (seed 002's permission.acts_as), set by the gateway, never the agent.
	ActsAs string `json:"acts_as,omitempty"`
}

// answer is what the entry writes on stdout: klock's form
// {output, tokens_used, cost} or {error}, or seed 004 §5.2's
// {ok, output, tokens_used, cost_1t} (with seed 002's {ok: false,
// error_class, retryable, message} for a failure).
type answer struct {
	OK         *bool           `json:"ok"`
	Output     json.RawMessage `json:"output"`
	TokensUsed *int64          `json:"tokens_used"`
	Cost       json.RawMessage `json:"cost"`
	Cost1T     json.RawMessage `json:"cost_1t"`
	Breakdown  json.RawMessage `json:"breakdown"`
	Error      *string         `json:"error"`
	ErrorClass string          `json:"error_class"`
	Retryable  *bool           `json:"retryable"`
	Message    string          `json:"message"`
}

// DefaultCost1TCurrency is the currency seed 004's cost_1t is read in when
// the runner names none. The seed gives the number no unit; klock reads it
// as US dollars, KCC's unit of cost, and an operator whose plugins price in
// another unit sets Runner.Cost1TCurrency.
const DefaultCost1TCurrency = "USD"

// Result is one call's outcome.
type Result struct {
	// Output is the plugin's output (JSON; null when it gave none).
	Output json.RawMessage
	// Failed: the plugin reported an error of its own (Message).
	Failed  bool
	Message string
	// TokensUsed and Cost are what the plugin reported; Cost nil: none.
	TokensUsed int64
	Cost       *money.Amount
	// Cost1T is seed 004's cost_1t exactly as the plugin wrote it; Cost is
	// it in the runner's currency, rounded up to a minor unit (CostRounded)
	// when it has more digits: a budget never under-counts a cost.
	Cost1T      string
	CostRounded bool
	// Breakdown is the plugin's itemized cost as it sent it (Cost is its
	// sum), for the receipt's cost_breakdown.
	Breakdown json.RawMessage
	// Session is the klock session id, LogPath its verification log.
	Session, LogPath string
}

func parseAnswer(out []byte, cost1TCurrency string) (*Result, error) {
	var a answer
	d := json.NewDecoder(bytes.NewReader(out))
	d.DisallowUnknownFields()
	if err := d.Decode(&a); err != nil {
		return nil, fmt.Errorf("the plugin's stdout is not one answer object {output, tokens_used, cost}, {ok, output, tokens_used, cost_1t} or {error}: %v", err)
	}
	r := &Result{Output: a.Output}
	if len(r.Output) == 0 {
		r.Output = json.RawMessage("null")
	}
	failed := a.Error != nil || a.OK != nil && !*a.OK
	if a.OK != nil && *a.OK && (a.Error != nil || a.ErrorClass != "") {
		return nil, errors.New(`"ok": true with an error: send {"ok": false, ...} for a failure`)
	}
	if failed {
		r.Failed = true
		switch {
		case a.Error != nil && *a.Error != "":
			r.Message = *a.Error
		case a.Message != "":
			r.Message = a.Message
		default:
			r.Message = "the plugin reported an error without a message"
		}
		if a.ErrorClass != "" {
			r.Message = a.ErrorClass + ": " + r.Message
		}
	}
	if a.TokensUsed != nil {
		if *a.TokensUsed < 0 {
			return nil, errors.New("tokens_used is negative")
		}
		r.TokensUsed = *a.TokensUsed
	}
	cost, cost1T := present(a.Cost), present(a.Cost1T)
	switch {
	case cost != nil && cost1T != nil:
		return nil, errors.New("both cost and cost_1t: send one")
	case cost != nil:
		amt, err := parseCost(cost)
		if err != nil {
			return nil, fmt.Errorf(`cost: %v (want "0.02 USD" or {"units": 2, "currency": "USD"})`, err)
		}
		r.Cost = &amt
	case cost1T != nil:
		// The number's text, never a float64: 0.00002 has no exact float.
		text := string(cost1T)
		if cost1TCurrency == "" {
			cost1TCurrency = DefaultCost1TCurrency
		}
		units, exact, err := money.ReportedUnits(text, cost1TCurrency)
		if err != nil {
			return nil, fmt.Errorf("cost_1t: %w (want a non-negative JSON number of %s, e.g. 0.00002)", err, cost1TCurrency)
		}
		r.Cost = &money.Amount{Units: units, Currency: cost1TCurrency}
		r.Cost1T, r.CostRounded = text, !exact
	}
	if err := r.itemize(a.Breakdown); err != nil {
		return nil, err
	}
	return r, nil
}

// present returns a field's JSON, or nil when it is absent or null.
func present(raw json.RawMessage) []byte {
	if c := bytes.TrimSpace(raw); len(c) > 0 && string(c) != "null" {
		return c
	}
	return nil
}

func parseCost(c []byte) (money.Amount, error) {
	var s string
	if json.Unmarshal(c, &s) == nil {
		return money.Parse(s)
	}
	var a money.Amount
	d := json.NewDecoder(bytes.NewReader(c))
	d.DisallowUnknownFields()
	if err := d.Decode(&a); err != nil {
		return money.Amount{}, err
	}
	return money.New(a.Units, a.Currency)
}
