package plugin

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy/money"
)

// Seed 004 §5.2's response, as the seed writes it, is a
// plugin answer: ok, output, tokens_used and cost_1t read exactly.
func TestSeed004AnswerAccepted(t *testing.T) {
	data, err := os.ReadFile("testdata/seed004-answer.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseAnswer(data, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Failed || string(r.Output) != `"... sanitized result ..."` || r.TokensUsed != 123 {
		t.Errorf("answer %+v", r)
	}
	// 0.00002 USD is less than a cent: charged as one, never as nothing.
	if r.Cost == nil || *r.Cost != (money.Amount{Units: 1, Currency: "USD"}) || r.Cost1T != "0.00002" || !r.CostRounded {
		t.Errorf("cost %v (cost_1t %q, rounded %v); want 0.01 USD rounded up from 0.00002", r.Cost, r.Cost1T, r.CostRounded)
	}
	// In a currency with micro-units it is exact.
	r, err = parseAnswer(data, "USDC")
	if err != nil || r.Cost == nil || *r.Cost != (money.Amount{Units: 20, Currency: "USDC"}) || r.CostRounded {
		t.Errorf("in USDC: %+v, %v; want 20 micro-USDC, exact", r, err)
	}
}

func TestAnswerForms(t *testing.T) {
	for _, tc := range []struct {
		in      string
		failed  bool
		message string
		cost    string
		bad     string
	}{
		{in: `{"output": {"a": 1}, "tokens_used": 3, "cost": "0.01 USD"}`, cost: "0.01 USD"},
		{in: `{"ok": true, "output": 1, "cost_1t": 2e-05}`, cost: "0.01 USD"},
		{in: `{"ok": true, "output": 1, "cost_1t": 0.5}`, cost: "0.50 USD"},
		{in: `{"error": "boom"}`, failed: true, message: "boom"},
		{in: `{"ok": false, "error_class": "tool_timeout", "retryable": true, "message": "slow upstream"}`, failed: true, message: "tool_timeout: slow upstream"},
		{in: `{"ok": false}`, failed: true, message: "the plugin reported an error without a message"},
		{in: `{"ok": true, "error": "x"}`, bad: "ok"},
		{in: `{"cost": "0.01 USD", "cost_1t": 0.01}`, bad: "both"},
		{in: `{"cost_1t": -1}`, bad: "cost_1t"},
		{in: `{"cost_1t": "0.01"}`, bad: "cost_1t"},
		{in: `{"cost_1t": 1e400}`, bad: "cost_1t"},
		{in: `{"tokens_used": -1}`, bad: "negative"},
		{in: `{"ok": true, "extra": 1}`, bad: "unknown field"},
	} {
		r, err := parseAnswer([]byte(tc.in), "")
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%s: err = %v; want one naming %q", tc.in, err, tc.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if r.Failed != tc.failed || r.Message != tc.message {
			t.Errorf("%s: failed %v %q; want %v %q", tc.in, r.Failed, r.Message, tc.failed, tc.message)
		}
		got := ""
		if r.Cost != nil {
			got = r.Cost.String()
		}
		if got != tc.cost {
			t.Errorf("%s: cost %q; want %q", tc.in, got, tc.cost)
		}
	}
}

func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{`{"ok":true,"output":"x","tokens_used":123,"cost_1t":0.00002}`, `{"error":"e"}`, `{"cost":"1 USD"}`, `{"cost_1t":1e-64}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseAnswer(data, "")
		if err != nil {
			return
		}
		if r.Cost != nil && r.Cost1T != "" {
			// The charge is never below what the plugin reported.
			if v, err := json.Number(r.Cost1T).Float64(); err == nil && float64(r.Cost.Units) < v*100*(1-1e-9) {
				t.Fatalf("cost_1t %s charged as %v", r.Cost1T, r.Cost)
			}
		}
	})
}
