package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func warningCodes(m *Manifest) []string {
	var out []string
	for _, w := range m.Warnings {
		out = append(out, w.Code)
	}
	return out
}

func TestWarnings(t *testing.T) {
	loose := strings.Replace(manifest([]string{"CONSUMES FILE:/w/**"}, ""), "max_tokens_in: 200", "max_tokens_in: 1000", 1)
	if m := mustParse(t, loose); !slices.Contains(warningCodes(m), "loose-envelope") {
		t.Errorf("max = 10x expected must warn: %v", m.Warnings)
	}
	concerning := strings.Replace(manifest([]string{"CONSUMES FILE:/w/**"}, ""), "context_efficiency: 0.7", "context_efficiency: 0.35", 1)
	if m := mustParse(t, concerning); !slices.Contains(warningCodes(m), "context-efficiency") {
		t.Errorf("0.35 must warn: %v", m.Warnings)
	}
	if m := mustParse(t, manifest([]string{"MUTATES FILE:/**"}, "")); !slices.Contains(warningCodes(m), "broad-scope") {
		t.Errorf("MUTATES /** must warn: %v", m.Warnings)
	}
	if m := mustParse(t, manifest([]string{"CONSUMES FILE:/w/**", "CONSUMES FILE:/w/**"}, "")); !slices.Contains(warningCodes(m), "duplicate-intent") {
		t.Errorf("duplicate intent must warn: %v", m.Warnings)
	}
	if m := mustParse(t, manifest([]string{"CONSUMES FILE:/w/**"}, "")); len(m.Warnings) != 0 {
		t.Errorf("clean manifest warned: %v", m.Warnings)
	}
}

func TestRules(t *testing.T) {
	tool := func(extra string) string {
		return "  - name: t1\n    blast_radius: local\n" + extra
	}
	for _, tc := range []struct {
		name, tools string
		code        string
	}{
		{"KCC-only tool gets safe defaults", tool(""), ""},
		{"contract without side effect", tool("    input_schema: {s: {type: string}}\n"), "required"},
		{"reversible no rollback", tool("    side_effects: REVERSIBLE-WRITE\n"), "no-rollback"},
		{"reversible with rollback", tool("    side_effects: REVERSIBLE-WRITE\n    rollback: {mechanism: undo_t1}\n"), ""},
		{"unreadable window", tool("    side_effects: REVERSIBLE-WRITE\n    rollback: {mechanism: undo_t1, window: 24 fortnights}\n"), "rollback-window"},
		{"irreversible conditional", tool("    side_effects: IRREVERSIBLE-WRITE\n    autonomy: {unsupervised_if: 'true'}\n"), "irreversible-unsupervised"},
		{"key without source", tool("    side_effects: READ\n    idempotency: {mode: key}\n"), "required"},
		{"enum without values", tool("    side_effects: READ\n    input_schema: {r: {type: enum}}\n"), "required"},
		{"min above max", tool("    side_effects: READ\n    input_schema: {n: {type: number, min: 5, max: 1}}\n"), "range"},
		{"bad regexp", tool("    side_effects: READ\n    input_schema: {s: {type: string, pattern: '('}}\n"), "format"},
		{"bad binding", tool("    side_effects: READ\n    input_schema: {s: {type: string, must_match: customer}}\n"), "format"},
		{"rate by unknown arg", tool("    side_effects: READ\n    rate_limits: {per_argument: {cust: {per_day: 1}}}\n"), "unknown-argument"},
		{"cel not bool", tool("    side_effects: READ\n    autonomy: {unsupervised_if: '1 + 2'}\n"), "cel"},
		{"cel typed args", tool("    side_effects: READ\n    input_schema: {n: {type: integer}}\n    autonomy: {unsupervised_if: 'n.startsWith(\"x\")'}\n"), "cel"},
		{"wildcard name", "  - name: '*'\n    blast_radius: read\n    side_effects: READ\n", "wildcard-tool"},
		{"no blast radius: organizational", "  - name: t1\n    side_effects: READ\n", ""},
		{"bad category", tool("    side_effects: READ\n    category: E\n"), "enum"},
		{"bad capability", tool("    side_effects: READ\n    capability: invoke-t1\n"), "format"},
		{"bool as string", tool("    side_effects: READ\n    untrusted_content: 'yes'\n"), "type"},
		{"float rate", tool("    side_effects: READ\n    rate_limit: 1.5\n"), "type"},
	} {
		_, err := Parse("t.yaml", []byte(manifest([]string{"CONSUMES FILE:/w/**"}, tc.tools)))
		got := codes(err)
		if tc.code == "" {
			if err != nil {
				t.Errorf("%s: unexpected %v", tc.name, err)
			}
			continue
		}
		if !slices.Contains(got, tc.code) {
			t.Errorf("%s: codes %v, want %s (%v)", tc.name, got, tc.code, err)
		}
	}
}

func TestParentGrantFormat(t *testing.T) {
	for grant, want := range map[string]string{"orchestrator-01#0": "", "orchestrator-01": "format", "#0": "format", "a b#1": "format"} {
		src := strings.Replace(manifest([]string{"CONSUMES FILE:/w/**"}, ""), "max_tokens_in: 200", "max_tokens_in: 200\n  parent_grant: \""+grant+"\"", 1)
		_, err := Parse("t.yaml", []byte(src))
		if got := codes(err); want == "" && err != nil || want != "" && !slices.Contains(got, want) {
			t.Errorf("parent_grant %q: %v, want %q", grant, err, want)
		}
	}
}

func TestEveryErrorReportedAtOnce(t *testing.T) {
	src := strings.NewReplacer("mode", "mdoe", "context_efficiency: 0.7", "context_efficiency: 0.1").Replace(
		"mode: strict\n" + manifest([]string{"MUTATE FILE:/x", "CONSUMES FILE:/a/*.c"}, "  - name: any\n    blast_radius: read\n    side_effects: READ\n"))
	_, err := Parse("t.yaml", []byte(src))
	ve, ok := err.(*ValidationError)
	if !ok || len(ve.Diags) < 3 {
		t.Fatalf("want every decode error in one run, got %v", err)
	}
}

func TestJSONManifestPositions(t *testing.T) {
	src := `{
  "apiVersion": "klock/v1",
  "agent": {"id": "j"},
  "intents": ["CONSUMES FILE:/w/**"],
  "cost_envelope": {"expected_tokens_in": 1, "max_tokens_in": 2, "expected_tokens_out": 1, "max_tokens_out": 2,
    "expected_latency_ms": 1, "max_latency_ms": 2, "context_efficiency": 0.5,
    "expected_cost": {"units": 1, "currency": "USD"}, "max_cost": {"units": 2.5, "currency": "USD"}}
}`
	_, err := Parse("m.json", []byte(src))
	ve, ok := err.(*ValidationError)
	if !ok || ve.Diags[0].Pos.Line != 7 || ve.Diags[0].Code != "money-float" {
		t.Fatalf("JSON float money at line 7: %v", err)
	}
}

func TestMultipleDocumentsRejected(t *testing.T) {
	src := manifest([]string{"CONSUMES FILE:/w/**"}, "") + "---\nagent: {id: x}\n"
	if c := codes(mustFail(t, src)); !slices.Contains(c, "syntax") {
		t.Fatalf("codes %v", c)
	}
}

func TestAliasBomb(t *testing.T) {
	src := "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n" +
		"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nintents: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
	mustFail(t, src) // must return, not hang or exhaust memory
}

func mustFail(t *testing.T, src string) error {
	t.Helper()
	_, err := Parse("t.yaml", []byte(src))
	if err == nil {
		t.Fatal("parse succeeded")
	}
	return err
}

func TestAutonomyEval(t *testing.T) {
	m, err := Load("../examples/manifests/refund-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var refund *Tool
	for i := range m.DeclaredTools {
		if m.DeclaredTools[i].Name == "issue_refund" {
			refund = &m.DeclaredTools[i]
		}
	}
	cond, err := CompileAutonomy(refund)
	if err != nil || cond == nil {
		t.Fatal(err)
	}
	acct := func(tier string) map[string]any { return map[string]any{"account": map[string]any{"tier": tier}} }
	for _, tc := range []struct {
		amount float64
		tier   string
		want   bool
	}{{49.99, "pro", true}, {50, "pro", true}, {50.01, "pro", false}, {10, "enterprise", false}} {
		got, err := cond.Eval(map[string]any{"amount_usd": tc.amount}, acct(tc.tier))
		if err != nil || got != tc.want {
			t.Errorf("amount %v tier %s = %v, %v; want %v", tc.amount, tc.tier, got, err, tc.want)
		}
	}
	if _, err := cond.Eval(map[string]any{}, acct("pro")); err == nil {
		t.Error("a missing argument must be an evaluation error (treated as not unsupervised)")
	}
}

func TestRollbackWindowDuration(t *testing.T) {
	for w, want := range map[string]time.Duration{"24h from issue": 24 * time.Hour, "30m": 30 * time.Minute, "15 min": 15 * time.Minute,
		"7d": 7 * 24 * time.Hour, "2 weeks": 14 * 24 * time.Hour, "90s": 90 * time.Second, "3 hours": 3 * time.Hour} {
		d, ok, err := Rollback{Window: w}.Duration()
		if err != nil || !ok || d != want {
			t.Errorf("%q: %v %v %v, want %v", w, d, ok, err, want)
		}
	}
	for _, w := range []string{"", "session", "until sent"} {
		if _, ok, err := (Rollback{Window: w}).Duration(); ok || err != nil {
			t.Errorf("%q: a prose window is not a clock: %v %v", w, ok, err)
		}
	}
	for _, w := range []string{"24 fortnights", "0h", "99999999999999999999h"} {
		if _, _, err := (Rollback{Window: w}).Duration(); !errors.Is(err, ErrRollbackWindow) {
			t.Errorf("%q: %v, want ErrRollbackWindow", w, err)
		}
	}
}
