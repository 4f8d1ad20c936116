package tools

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/internal/testutil"
)

// TestPluginContractOnTheWire: a real plugin behind klock tools serve,
// whose contract declares seed 002's permission and KCC's
// cost_per_invocation. The plugin receives the declared acts_as in its
// context; a recipient outside scope or matching forbidden is refused
// (tool_restricted, naming the field and the argument) before it runs;
// each call is charged the plugin's reported 0.02 USD plus the declared
// 0.03 USD, itemized in the signed receipt; and the same payment a second
// time in the run waits for a human instead of paying twice.
func TestPluginContractOnTheWire(t *testing.T) {
	testutil.RequirePrivileged(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	plugins := filepath.Join(base, "plugins")
	// The plugin answers with the request it read: what reached it.
	plugin(t, plugins, "pay", `{"network":false,"filesystem":false}`, `read -r line
printf '{"output":%s,"cost":"0.02 USD"}\n' "$line"
`)
	receipts := filepath.Join(base, "receipts")
	decl := `  - name: pay
    type: write
    blast_radius: domain
    category: B
    side_effects: REVERSIBLE-WRITE
    rollback: {mechanism: reverse the payment by hand, window: 24h}
    idempotency: {mode: none}
    autonomy: {unsupervised: always}
    timeout_ms: 30000
    cost_per_invocation: "0.03 USD"
    permission:
      acts_as: payments-bot, customer-bound
      scope: [to=acct_*]
      forbidden: [to=acct_blocked*]
    input_schema:
      to: {type: string}
      cents: {type: integer, min: 1, max: 500}
  - {name: flat, type: read, blast_radius: read, category: B, side_effects: READ, timeout_ms: 30000, cost_per_invocation: "0.03 USD"}
  - {name: dear, type: read, blast_radius: read, category: B, side_effects: READ, timeout_ms: 30000, cost_per_invocation: "0.20 USD"}
grants:
  - {tool: pay, max_cost_per_invocation: "0.10 USD", max_total_cost: "1.00 USD"}
  - {tool: flat, max_total_cost: "1.00 USD"}
  - {tool: dear, max_cost_per_invocation: "0.10 USD"}
`
	// flat reports no cost: its declared fee is what it is charged. dear's
	// fee is over its grant's per-call limit: refused before it runs.
	plugin(t, plugins, "flat", `{"network":false,"filesystem":false}`, "read -r line\nprintf '{\"output\":1}\\n'\n")
	plugin(t, plugins, "dear", `{"network":false,"filesystem":false}`, "read -r line\nprintf '{\"output\":1}\\n'\n")
	url, stop := serve(t, base, plugins, decl, "--receipts", receipts, "--approval-wait", "200ms")
	r := post(t, url, `{"tool":"pay","args":{"to":"acct_1","cents":5}}`)
	var in struct {
		Context struct {
			ActsAs string `json:"acts_as"`
		} `json:"context"`
	}
	if err := json.Unmarshal(r.Output, &in); err != nil || !r.OK || in.Context.ActsAs != "payments-bot, customer-bound" {
		t.Fatalf("pay: %+v (the plugin read %s)", r, r.Output)
	}
	if r.Charged == nil || r.Charged.Units != 5 || r.Cost == nil || r.Cost.Units != 2 {
		t.Fatalf("pay was charged %+v for a reported %+v; want 0.05 USD: 0.02 reported + 0.03 declared", r.Charged, r.Cost)
	}
	if r := post(t, url, `{"tool":"flat","args":{}}`); !r.OK || r.Charged == nil || r.Charged.Units != 3 || r.Charged.Source != "unavailable" {
		t.Fatalf("flat: %+v (charged %+v); want its 0.03 USD fee, the reservation standing", r, r.Charged)
	}
	if r := post(t, url, `{"tool":"dear","args":{}}`); r.OK || r.Class != "tool_restricted" || r.Reason != "budget" {
		t.Fatalf("dear: %+v; want its fee refused by the per-call limit", r)
	}
	for _, tc := range []struct{ to, reason, field string }{
		{"acct_blocked_7", "permission_forbidden", "permission.forbidden"},
		{"cus_9", "permission_scope", "permission.scope"},
	} {
		r := post(t, url, fmt.Sprintf(`{"tool":"pay","args":{"to":%q,"cents":5}}`, tc.to))
		if r.Status != 403 || r.Class != "tool_restricted" || r.Reason != tc.reason || !strings.Contains(r.Message, tc.field) || !strings.Contains(r.Message, `argument "to"`) {
			t.Errorf("pay to %s: %+v; want 403 tool_restricted %s naming %s and the argument", tc.to, r, tc.reason, tc.field)
		}
	}
	if r := post(t, url, `{"tool":"pay","args":{"cents":5,"to":"acct_1"}}`); r.OK || r.Class != "tool_restricted" || r.Reason != "approval_pending" || !strings.Contains(r.Message, "not idempotent") {
		t.Fatalf("the same payment again: %+v; want it held for approval", r)
	}
	stop()

	if out, err := exec.Command(klockBin, "receipts", "verify", receipts).CombinedOutput(); err != nil {
		t.Fatalf("klock receipts verify: %v\n%s", err, out)
	}
	var settled []*receipt.Receipt
	receipt.VerifyFile(filepath.Join(receipts, "receipts.jsonl"), nil, func(x *receipt.Receipt) error {
		if x.Phase == receipt.PhaseReconcile && x.ToolName == "pay" {
			settled = append(settled, x)
		}
		return nil
	})
	if len(settled) != 1 {
		t.Fatalf("%d reconcile receipts for pay, want 1: the refused calls reached neither the plugin nor the budget", len(settled))
	}
	f := settled[0].Metadata.Financial
	if f.CostCharged != 5 || string(f.CostBreakdown) != `{"cost_per_invocation":"0.03 USD","metered":"0.02 USD"}` ||
		!strings.Contains(fmt.Sprint(settled[0].Evidence), "cost_per_invocation 0.03 USD charged on top of the reported 0.02 USD") {
		t.Fatalf("receipt: charged %d, breakdown %s, evidence %v", f.CostCharged, f.CostBreakdown, settled[0].Evidence)
	}
}
