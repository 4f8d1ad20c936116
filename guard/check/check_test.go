package check

import (
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

func example(t testing.TB, name string) *policy.Manifest {
	t.Helper()
	_, f, _, _ := runtime.Caller(0)
	m, err := policy.Load(filepath.Join(filepath.Dir(f), "..", "..", "examples", "manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// clock is a settable fake clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var refundCtx = map[string]any{"task": map[string]any{"customer_id": "c_42"}, "account": map[string]any{"tier": "smb"}}

func refund(amount float64) map[string]any {
	return map[string]any{"customer_id": "c_42", "transaction_id": "tx_1", "amount_usd": amount, "reason_code": "DUPLICATE"}
}

func TestDecideRefundAgent(t *testing.T) {
	tests := []struct {
		name    string
		call    Call
		verdict Verdict
		class   toolerr.Class
		reason  string
		check   string
	}{
		{"undeclared tool", Call{Tool: "wire_money"}, Deny, toolerr.CapabilityMissing, "undeclared", "declared"},
		{"read with matching binding", Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_42"}, Context: refundCtx}, Allow, "", "", "autonomy"},
		{"binding mismatch", Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_99"}, Context: refundCtx}, Deny, toolerr.SandboxViolation, "binding_mismatch", "schema"},
		{"binding without context", Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_42"}}, Deny, toolerr.SandboxViolation, "binding_unresolved", "schema"},
		{"missing argument", Call{Tool: "get_account", Args: map[string]any{}, Context: refundCtx}, Deny, toolerr.InvalidArgs, "missing_argument", "schema"},
		{"undeclared argument", Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_42", "all": true}, Context: refundCtx}, Deny, toolerr.InvalidArgs, "undeclared_argument", "schema"},
		{"amount above max", Call{Tool: "issue_refund", Args: refund(5000.5), Context: refundCtx}, Deny, toolerr.InvalidArgs, "constraint", "schema"},
		{"amount as string", Call{Tool: "issue_refund", Args: map[string]any{"customer_id": "c_42", "transaction_id": "tx_1", "amount_usd": "10", "reason_code": "DUPLICATE"}, Context: refundCtx}, Deny, toolerr.InvalidArgs, "constraint", "schema"},
		{"enum outside values", Call{Tool: "issue_refund", Args: map[string]any{"customer_id": "c_42", "transaction_id": "tx_1", "amount_usd": 10.0, "reason_code": "WHIM"}, Context: refundCtx}, Deny, toolerr.InvalidArgs, "constraint", "schema"},
		{"small refund unsupervised (CEL true)", Call{Tool: "issue_refund", Args: refund(20), Context: refundCtx}, Allow, "", "", "autonomy"},
		{"large refund escalates (CEL false)", Call{Tool: "issue_refund", Args: refund(200), Context: refundCtx}, Escalate, "", "", "autonomy"},
		{"enterprise escalates", Call{Tool: "issue_refund", Args: refund(20), Context: map[string]any{"task": map[string]any{"customer_id": "c_42"}, "account": map[string]any{"tier": "enterprise"}}}, Escalate, "", "", "autonomy"},
		{"irreversible always escalates", Call{Tool: "send_email", Args: map[string]any{"draft_id": "d1"}}, Escalate, "", "", "effect"},
		{"autonomy never escalates", Call{Tool: "change_plan", Args: map[string]any{"customer_id": "c_42", "plan_id": "p"}, Context: refundCtx}, Escalate, "", "", "autonomy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(example(t, "refund-agent.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			d := p.Decide(&tt.call)
			if d.Verdict != tt.verdict || d.Check != tt.check {
				t.Fatalf("verdict %v at %q (%v), want %v at %q", d.Verdict, d.Check, d.Err, tt.verdict, tt.check)
			}
			if tt.verdict == Deny {
				if !errors.Is(d.Err, sentinelOf(tt.class)) || d.Err.Reason != tt.reason || d.Err.Message == "" {
					t.Fatalf("err %+v, want class %s reason %s", d.Err, tt.class, tt.reason)
				}
			}
		})
	}
}

func sentinelOf(c toolerr.Class) error {
	return map[toolerr.Class]error{toolerr.CapabilityMissing: toolerr.ErrCapabilityMissing, toolerr.SandboxViolation: toolerr.ErrSandboxViolation,
		toolerr.InvalidArgs: toolerr.ErrInvalidArgs, toolerr.Restricted: toolerr.ErrRestricted}[c]
}

func TestRateLimitsPerRunAndPerMinute(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	p, err := New(example(t, "refund-agent.yaml"), WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	// issue_refund: per_run 3.
	for i := 0; i < 3; i++ {
		if d := p.Decide(&Call{Tool: "issue_refund", Args: refund(10), Context: refundCtx, RunID: "r1"}); d.Verdict != Allow {
			t.Fatalf("call %d: %v %v", i, d.Verdict, d.Err)
		}
	}
	d := p.Decide(&Call{Tool: "issue_refund", Args: refund(10), Context: refundCtx, RunID: "r1"})
	if d.Verdict != Deny || d.Err.Reason != "rate_per_run" || d.Err.Retryable {
		t.Fatalf("4th call in run: %v %+v", d.Verdict, d.Err)
	}
	if d := p.Decide(&Call{Tool: "issue_refund", Args: refund(10), Context: refundCtx, RunID: "r2"}); d.Verdict != Allow {
		t.Fatalf("a new run starts fresh: %v", d.Err)
	}
	// get_account: category B default, 120 per minute, refilled over time.
	n := 0
	for ; n < 1000; n++ {
		if d := p.Decide(&Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_42"}, Context: refundCtx}); d.Verdict == Deny {
			if d.Err.Reason != "rate_per_minute" || !d.Err.Retryable {
				t.Fatalf("denial: %+v", d.Err)
			}
			break
		}
	}
	if n != 120 {
		t.Fatalf("category B allowed %d calls in one instant, want 120", n)
	}
	c.t = c.t.Add(time.Second) // refills 2 tokens
	for i := 0; i < 2; i++ {
		if d := p.Decide(&Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_42"}, Context: refundCtx}); d.Verdict != Allow {
			t.Fatalf("after a second, call %d: %v", i, d.Err)
		}
	}
	if d := p.Decide(&Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_42"}, Context: refundCtx}); d.Verdict != Deny {
		t.Fatal("a third call after one second passed")
	}
}

func TestGovernanceAndTrifecta(t *testing.T) {
	p, err := New(example(t, "refund-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Disable("draft_email", "incident"); err != nil {
		t.Fatal(err)
	}
	if p.Declared("draft_email") {
		t.Fatal("a disabled tool is still listed")
	}
	d := p.Decide(&Call{Tool: "draft_email", Args: map[string]any{"customer_id": "c_42", "body": "x"}, Context: refundCtx})
	if d.Verdict != Deny || d.Err.Class != toolerr.Restricted || !strings.Contains(d.Err.Message, "incident") {
		t.Fatalf("disabled: %+v", d.Err)
	}
	if err := p.Disable("nope", ""); !errors.Is(err, ErrUnknownTool) {
		t.Fatalf("disable unknown: %v", err)
	}
	if err := p.Limit("get_account", policy.RateLimits{PerRun: 1}); err != nil {
		t.Fatal(err)
	}
	p.Decide(&Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_42"}, Context: refundCtx})
	if d := p.Decide(&Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_42"}, Context: refundCtx}); d.Verdict != Deny || d.Err.Reason != "rate_per_run" {
		t.Fatalf("limit per_run 1: %v", d.Verdict)
	}

	tp, err := New(example(t, "trifecta-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if d := tp.Decide(&Call{Tool: "read_inbox"}); d.Verdict != Allow {
		t.Fatalf("trifecta READ: %v", d.Verdict)
	}
	if d := tp.Decide(&Call{Tool: "post_webhook", Args: map[string]any{"url": "https://hooks.example.com/x", "body": "hi"}}); d.Verdict != Escalate || d.Check != "trifecta" || d.IdemKey == "" {
		t.Fatalf("trifecta external call: %v %q key %q", d.Verdict, d.Check, d.IdemKey)
	}
}

func TestIdempotencyKeyIsCanonical(t *testing.T) {
	p, _ := New(example(t, "refund-agent.yaml"))
	a := p.Decide(&Call{Tool: "issue_refund", Args: refund(10), Context: refundCtx, RunID: "a"})
	args := refund(10)
	args["reason_code"] = "GOODWILL" // not in key_source
	b := p.Decide(&Call{Tool: "issue_refund", Args: args, Context: refundCtx, RunID: "b"})
	c := p.Decide(&Call{Tool: "issue_refund", Args: refund(11), Context: refundCtx, RunID: "c"})
	if a.IdemKey == "" || a.IdemKey != b.IdemKey || a.IdemKey == c.IdemKey {
		t.Fatalf("keys: %s %s %s", a.IdemKey, b.IdemKey, c.IdemKey)
	}
}
