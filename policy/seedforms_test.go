package policy

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy/money"
)

// seed002Manifest wraps testdata/seed002-contract.yaml, seed 002's Tool
// Trust Contract as the seed writes it, as a manifest's tool. Its
// must_belong_to names no lookup and its permission is prose, and klock
// refuses what cannot be enforced (TestSeed002ContractNeedsALookupAndEntries):
// the lines changed here name a lookup, with the READ tool it calls, and
// write scope and forbidden as entries (Seed002Permission).
func seed002Manifest(t *testing.T) string {
	t.Helper()
	return seed002Wrapped(t, true)
}

func seed002Wrapped(t *testing.T, withLookup bool) string {
	t.Helper()
	data, err := os.ReadFile("testdata/seed002-contract.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if withLookup {
		data = []byte(strings.Replace(string(data), "must_belong_to: customer_id }", "must_belong_to: customer_id, lookup: get_transactions }", 1))
		data = []byte(seed002Permission.Replace(string(data)))
	}
	var tool strings.Builder
	for i, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if i == 0 {
			tool.WriteString("  - " + line + "\n")
		} else {
			tool.WriteString("    " + line + "\n")
		}
	}
	if withLookup {
		tool.WriteString("  - {name: get_transactions, blast_radius: read, side_effects: READ, input_schema: {customer_id: {type: string}}}\n")
	}
	return manifest([]string{"CONSUMES FILE:/w/**"}, tool.String())
}

// seed002Permission writes seed 002's prose scope and forbidden as
// entries the gateway checks (the prose's customer is must_match's, its
// transactions must_belong_to's).
var seed002Permission = strings.NewReplacer(
	`scope: "refund the named customer's own transactions only"`, `scope: "customer_id=c_*, transaction_id=t*"`,
	`forbidden: "cross-customer access, payouts, plan changes"`, `forbidden: "*=po_*, *=plan_*"`)

// TestSeed002ContractNeedsALookupAndEntries: seed 002's contract verbatim
// is refused, located, for what the gateway could not enforce alone: its
// must_belong_to names no lookup tool, and its permission's scope and
// forbidden are prose (one diagnostic per entry of the comma-separated
// string). Every other field loads.
func TestSeed002ContractNeedsALookupAndEntries(t *testing.T) {
	_, err := Parse("test.yaml", []byte(seed002Wrapped(t, false)))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a validation error, got %v", err)
	}
	var got []string
	for _, d := range ve.Diags {
		if d.Code != "unenforceable" || d.Pos.Line == 0 {
			t.Errorf("diagnostic %s %s at %v: want unenforceable, located", d.Code, d.Field, d.Pos)
		}
		got = append(got, d.Field[strings.Index(d.Field, "]")+2:])
	}
	want := []string{"permission.scope[0]", "permission.forbidden[0]", "permission.forbidden[1]", "permission.forbidden[2]", "input_schema.transaction_id.must_belong_to"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("diagnostics on %v, want %v (%v)", got, want, err)
	}
}

// Seed 002's contract, as written, loads into klock's form.
func TestSeed002ContractLoads(t *testing.T) {
	m := mustParse(t, seed002Manifest(t))
	tl := &m.DeclaredTools[0]
	if tl.Name != "issue_refund" || tl.Version != "2" {
		t.Errorf("name %q version %q; want issue_refund, 2 (tool: is seed 002's name:)", tl.Name, tl.Version)
	}
	rl := tl.RateLimits
	if rl.PerRun != 3 || rl.PerMinute != 20 || rl.PerArgument["customer_id"].PerDay != 5 {
		t.Errorf("rate limits %+v; want per_run 3, per_minute 20 (per_agent_per_minute), per_argument.customer_id.per_day 5", rl)
	}
	if tl.Autonomy.Else != "ESCALATE" || tl.Autonomy.ElseNote != "for human approval" {
		t.Errorf("else %q note %q; want ESCALATE, \"for human approval\"", tl.Autonomy.Else, tl.Autonomy.ElseNote)
	}
	c, err := CompileAutonomy(tl)
	if err != nil {
		t.Fatal(err)
	}
	if want := `amount_usd <= 50 && context.account.tier != "enterprise"`; c.CEL != want || !c.Translated() {
		t.Errorf("CEL %q; want %q", c.CEL, want)
	}
	for _, tc := range []struct {
		amount float64
		ctx    map[string]any
		want   bool
	}{
		{30, map[string]any{"account": map[string]any{"tier": "pro"}}, true},
		{30, map[string]any{"account.tier": "pro"}, true}, // flat, as a JSON body may send it
		{30, map[string]any{"account": map[string]any{"tier": "enterprise"}}, false},
		{80, map[string]any{"account": map[string]any{"tier": "pro"}}, false},
	} {
		got, err := c.Eval(map[string]any{"amount_usd": tc.amount}, tc.ctx)
		if err != nil || got != tc.want {
			t.Errorf("Eval(amount %v, %v) = %v, %v; want %v", tc.amount, tc.ctx, got, err, tc.want)
		}
	}
	// No tier in the context: not unsupervised (the gateway escalates).
	if ok, err := c.Eval(map[string]any{"amount_usd": 30.0}, nil); ok || !errors.Is(err, ErrAutonomyEval) {
		t.Errorf("Eval without context = %v, %v; want false, ErrAutonomyEval", ok, err)
	}
	// Seed 002 gives no blast radius: the widest applies, with a warning.
	if tl.BlastRadius != "organizational" || !slices.Contains(warningCodes(m), "defaulted") {
		t.Errorf("blast radius %q, warnings %v; want organizational and a defaulted warning", tl.BlastRadius, m.Warnings)
	}
	row := m.PermissionsMatrix()[0]
	if row.Idempotent != "key" || row.Rollback != "void_refund(refund_id)" || row.UnsupervisedCEL != c.CEL {
		t.Errorf("matrix row %+v", row)
	}
}

// KCC's *_usd fields and cost_per_invocation are read
// exactly from their decimal text.
func TestKCCManifestLoads(t *testing.T) {
	m, err := Load("testdata/kcc-manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := m.CostEnvelope
	if c.MaxCost == nil || c.MaxCost.Amount != (money.Amount{Units: 200, Currency: "USD"}) ||
		c.ExpectedCost == nil || c.ExpectedCost.Amount != (money.Amount{Units: 40, Currency: "USD"}) {
		t.Errorf("cost envelope %v / %v; want 0.40 USD expected, 2.00 USD max", c.ExpectedCost, c.MaxCost)
	}
	ws := m.DeclaredTools[0]
	if ws.CostPerInvocation == nil || ws.CostPerInvocation.Money == nil || ws.CostPerInvocation.Money.Amount != (money.Amount{Units: 1, Currency: "USD"}) {
		t.Errorf("web_search cost_per_invocation %+v; want 1 cent", ws.CostPerInvocation)
	}
	if rn := m.DeclaredTools[1]; rn.CostPerInvocation == nil || rn.CostPerInvocation.Tokens != 1200 {
		t.Errorf("read_notes cost_per_invocation %+v; want 1200 tokens", rn.CostPerInvocation)
	}
}

// A tool declared with only KCC fields gets seed 002's safe
// defaults (not idempotent, approval needed) instead of an error.
func TestKCCOnlyToolSafeDefaults(t *testing.T) {
	m, err := Load("testdata/kcc-manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, row := range m.PermissionsMatrix() {
		tl := m.DeclaredTools[i]
		if tl.SideEffects != SideEffectIrreversibleWrite || tl.Idempotency.Mode != "none" {
			t.Errorf("%s: side effects %q idempotency %q; want IRREVERSIBLE-WRITE, none", tl.Name, tl.SideEffects, tl.Idempotency.Mode)
		}
		if row.Idempotent != "no" || row.Unsupervised != "never" || row.ApprovalNeeded != "always" {
			t.Errorf("%s: matrix %+v; want not idempotent, never unsupervised, approval always", tl.Name, row)
		}
	}
	n := 0
	for _, w := range m.Warnings {
		if w.Code == "defaulted" && strings.HasSuffix(w.Field, ".side_effects") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("want a defaulted warning per KCC-only tool, got %v", m.Warnings)
	}
}

// A decimal with more digits than the currency has is refused at its line
// and column; every other decimal is exact.
func TestUSDDecimalScalars(t *testing.T) {
	for _, tc := range []struct {
		value string
		units uint64
		code  string
	}{
		{"2.00", 200, ""}, {"2", 200, ""}, {`"2.50"`, 250, ""}, {"2.000", 200, ""}, {"0.10", 10, ""},
		{"1234567.89", 123456789, ""}, {"0.29", 29, ""}, // 0.29 is 0.28999999999999998 as a float64
		{"2.001", 0, "money-precision"}, {"0.005", 0, "money-precision"},
		{"1e2", 0, "money"}, {"-1.00", 0, "money"}, {"0x10", 0, "money"}, {".5", 0, "money"},
		{".inf", 0, "money"}, {"1_000", 0, "money"}, {`"2.00 USD"`, 0, "money"}, {"[1]", 0, "money"},
		{"99999999999999999999", 0, "money"},
	} {
		src := strings.Replace(manifest([]string{"CONSUMES FILE:/w/**"}, ""), `max_cost: "0.02 USD"`, "max_cost_usd: "+tc.value, 1)
		m, err := Parse("t.yaml", []byte(src))
		if tc.code == "" {
			if err != nil || m.CostEnvelope.MaxCost.Units != tc.units || m.CostEnvelope.MaxCost.Currency != "USD" {
				t.Errorf("max_cost_usd: %s = %v, %v; want %d cents", tc.value, m, err, tc.units)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("max_cost_usd: %s: want a ValidationError, got %v", tc.value, err)
			continue
		}
		d := ve.Diags[0]
		if d.Code != tc.code || d.Field != "cost_envelope.max_cost_usd" || d.Pos.Line != 18 || d.Pos.Col != 17 || d.Want == "" {
			t.Errorf("max_cost_usd: %s: %s (code %s at %d:%d); want %s at 18:17 with what to write", tc.value, d, d.Code, d.Pos.Line, d.Pos.Col, tc.code)
		}
	}
}

func TestKCCCostConflictsAndAmbiguity(t *testing.T) {
	both := strings.Replace(manifest([]string{"CONSUMES FILE:/w/**"}, ""), `max_cost: "0.02 USD"`, "max_cost: \"0.02 USD\"\n  max_cost_usd: 0.02", 1)
	if got := codes(parseErr(both)); !slices.Contains(got, "conflict") {
		t.Errorf("max_cost and max_cost_usd: codes %v; want conflict", got)
	}
	for value, code := range map[string]string{"100": "ambiguous-cost", "0.001": "money-precision", `"0.001 USDC"`: "", "1.5": "", "{tokens: 10}": ""} {
		src := manifest([]string{"CONSUMES FILE:/w/**"}, "  - {name: t1, blast_radius: read, cost_per_invocation: "+value+"}\n")
		got := codes(parseErr(src))
		if code == "" && got != nil || code != "" && !slices.Contains(got, code) {
			t.Errorf("cost_per_invocation: %s: codes %v; want %q", value, got, code)
		}
	}
}

func TestSeed002RateLimitErrors(t *testing.T) {
	tool := func(rates string) string {
		return "  - name: t1\n    blast_radius: read\n    side_effects: READ\n    input_schema: {order_id: {type: string}}\n    rate_limits: {" + rates + "}\n"
	}
	for rates, code := range map[string]string{
		"per_customer_per_day: 5":                          "unknown-argument",
		"per_order_per_day: 5":                             "",
		"per_order_per_run: 5":                             "format",
		"per_customer_per_fortnight: 5":                    "unknown-field",
		"per_agent_per_minute: 1.5":                        "type",
		"per_agent_per_hour: -1":                           "range",
		"per_argument: {order_id: {per_order_per_day: 1}}": "format",
	} {
		got := codes(parseErr(manifest([]string{"CONSUMES FILE:/w/**"}, tool(rates))))
		if code == "" && got != nil || code != "" && !slices.Contains(got, code) {
			t.Errorf("%s: codes %v; want %q", rates, got, code)
		}
	}
	m := mustParse(t, manifest([]string{"CONSUMES FILE:/w/**"}, tool("per_minute: 10, per_agent_per_minute: 5")))
	if got := m.DeclaredTools[0].RateLimits.PerMinute; got != 5 || !slices.Contains(warningCodes(m), "rate-mismatch") {
		t.Errorf("per_minute 10 and per_agent_per_minute 5: %d, %v; want the lower, 5, with a warning", got, m.Warnings)
	}
}

func parseErr(src string) error {
	_, err := Parse("t.yaml", []byte(src))
	return err
}

func ExampleTranslateCondition() {
	args := map[string]*ParamSchema{"amount_usd": {Type: "number"}}
	cel, _ := TranslateCondition("amount_usd <= 50 AND account.tier != enterprise", args)
	fmt.Println(cel)
	// Output: amount_usd <= 50 && context.account.tier != "enterprise"
}
