package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

// klock explain shows the CEL a seed 002 condition runs as.
func TestExplainShowsConditionTranslation(t *testing.T) {
	contract, err := os.ReadFile("../../policy/testdata/seed002-contract.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The lines changed: its must_belong_to names the lookup that
	// enforces it, and its permission is entries, not prose (policy's
	// TestSeed002ContractNeedsALookupAndEntries).
	contract = []byte(strings.NewReplacer("must_belong_to: customer_id }", "must_belong_to: customer_id, lookup: get_transactions }",
		`scope: "refund the named customer's own transactions only"`, `scope: "customer_id=c_*, transaction_id=t*"`,
		`forbidden: "cross-customer access, payouts, plan changes"`, `forbidden: "*=po_*, *=plan_*"`).Replace(string(contract)))
	lines := strings.Split(strings.TrimRight(string(contract), "\n"), "\n")
	var b strings.Builder
	b.WriteString("apiVersion: klock/v1\nagent: {id: refund-agent-02}\nintents: []\ndeclared_tools:\n  - " + lines[0] + "\n")
	for _, l := range lines[1:] {
		b.WriteString("    " + l + "\n")
	}
	b.WriteString("  - {name: get_transactions, blast_radius: read, side_effects: READ, input_schema: {customer_id: {type: string}}}\n")
	b.WriteString("cost_envelope: {expected_tokens_in: 100, max_tokens_in: 200, expected_tokens_out: 10, max_tokens_out: 20, expected_latency_ms: 10, max_latency_ms: 20, context_efficiency: 0.7, expected_cost_usd: 0.01, max_cost_usd: 0.02}\n")
	f := filepath.Join(t.TempDir(), "seed002.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "explain", f)
	if code != exitOK || !strings.Contains(out, `runs as the CEL amount_usd <= 50 && context.account.tier != "enterprise"`) {
		t.Fatalf("explain: %d\n%s", code, out)
	}
	js, code := run(t, "explain", "--json", f)
	if code != exitOK || !strings.Contains(js, `"unsupervised_cel": "amount_usd \u003c= 50 \u0026\u0026 context.account.tier != \"enterprise\""`) {
		t.Fatalf("explain --json: %d\n%s", code, js)
	}
}

// TestExplainSaysWhichNamesMayResolvePrivate: a manifest declaring a
// private prefix and a loopback address besides its host names says that
// those names may resolve there; one declaring only names says nothing.
func TestExplainSaysWhichNamesMayResolvePrivate(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, intents ...string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(testutil.ManifestYAML("dns-bot", "strict", dir, intents...)), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := write("private.yaml", "CONSUMES NET:*.example.test:443/tcp", "CONSUMES NET:svc.test:80/tcp",
		"CONSUMES NET:10.203.0.0/16:443/tcp", "CONSUMES NET:127.0.0.31:8080/tcp", "CONSUMES NET:93.184.216.34:443/tcp")
	out, code := run(t, "explain", f)
	want := "DNS: *.example.test, svc.test may resolve to the declared 10.203.0.0/16, 127.0.0.31; any other loopback, private, link-local or metadata answer is withheld"
	if code != exitOK || !strings.Contains(out, want) {
		t.Fatalf("explain: %d, want %q\n%s", code, want, out)
	}
	if js, _ := run(t, "explain", "--json", f); !strings.Contains(js, `"dns_private"`) {
		t.Errorf("explain --json lacks dns_private:\n%s", js)
	}
	out, code = run(t, "explain", write("public.yaml", "CONSUMES NET:svc.test:80/tcp", "CONSUMES NET:93.184.216.34:443/tcp"))
	if code != exitOK || strings.Contains(out, "DNS:") {
		t.Errorf("explain without a private declaration: %d\n%s", code, out)
	}
}

// klock explain says what the gateway does with a contract's permission
// and KCC's cost_per_invocation: charged per call when the tool has a
// grant, declared only when it has none or counts tokens.
func TestExplainShowsPermissionAndCostPerInvocation(t *testing.T) {
	dir := t.TempDir()
	m := strings.Replace(testutil.ManifestYAML("cost-bot", "strict", dir), "declared_tools: []\n", `declared_tools:
  - {name: search, blast_radius: read, side_effects: READ, cost_per_invocation: 0.01, permission: {acts_as: svc-search, forbidden: ["q=*password*"]}}
  - {name: notes, blast_radius: read, side_effects: READ, cost_per_invocation: "0.02 EUR"}
  - {name: summarize, blast_radius: read, side_effects: READ, cost_per_invocation: {tokens: 1200}}
`, 1) + `grants:
  - {tool: search, max_total_cost: "1.00 USD"}
`
	f := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(f, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "explain", f)
	for _, want := range []string{
		`search: acts as "svc-search" (sent with every call); forbidden q=*password*`,
		"search: cost_per_invocation 0.01 USD charged per call on top of the reported cost, to its grant",
		"notes: cost_per_invocation 0.02 EUR declared, not charged: no grant names notes",
		"summarize: cost_per_invocation 1200 tokens (tokens: declared, not charged to a money budget)",
	} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("explain: %d, want %q\n%s", code, want, out)
		}
	}
	js, code := run(t, "explain", "--json", f)
	if code != exitOK || !strings.Contains(js, `"cost_per_invocation": "0.01 USD"`) || !strings.Contains(js, `"forbidden": [`) {
		t.Fatalf("explain --json: %d\n%s", code, js)
	}
}
