package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/klocklabs/klock/guard/money"
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
}

// answer is what the entry writes on stdout.
type answer struct {
	Output     json.RawMessage `json:"output"`
	TokensUsed *int64          `json:"tokens_used"`
	Cost       json.RawMessage `json:"cost"`
	Breakdown  json.RawMessage `json:"breakdown"`
	Error      *string         `json:"error"`
}

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
	// Breakdown is the plugin's itemized cost as it sent it (Cost is its
	// sum), for the receipt's cost_breakdown.
	Breakdown json.RawMessage
	// Session is the klock session id, LogPath its verification log.
	Session, LogPath string
}

func parseAnswer(out []byte) (*Result, error) {
	var a answer
	d := json.NewDecoder(bytes.NewReader(out))
	d.DisallowUnknownFields()
	if err := d.Decode(&a); err != nil {
		return nil, fmt.Errorf("the plugin's stdout is not one answer object {output, tokens_used, cost} or {error}: %v", err)
	}
	r := &Result{Output: a.Output}
	if len(r.Output) == 0 {
		r.Output = json.RawMessage("null")
	}
	if a.Error != nil {
		r.Failed, r.Message = true, *a.Error
		if r.Message == "" {
			r.Message = "the plugin reported an error without a message"
		}
	}
	if a.TokensUsed != nil {
		if *a.TokensUsed < 0 {
			return nil, errors.New("tokens_used is negative")
		}
		r.TokensUsed = *a.TokensUsed
	}
	if c := bytes.TrimSpace(a.Cost); len(c) > 0 && string(c) != "null" {
		amt, err := parseCost(c)
		if err != nil {
			return nil, fmt.Errorf(`cost: %v (want "0.02 USD" or {"units": 2, "currency": "USD"})`, err)
		}
		r.Cost = &amt
	}
	if err := r.itemize(a.Breakdown); err != nil {
		return nil, err
	}
	return r, nil
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
