package tools

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/internal/testutil"
)

// A real plugin itemizes its cost in EUR; the
// USD grant is charged the breakdown's sum converted with the --rates file,
// and the signed receipt carries the breakdown, the rate's evidence (its
// source, time and the file's hash), policy_hash, content_hash and the
// cost's source.
func TestPluginBreakdownAndRatesReachTheReceipt(t *testing.T) {
	testutil.RequirePrivileged(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	plugins := filepath.Join(base, "plugins")
	plugin(t, plugins, "priced", `{"network":false,"filesystem":false}`,
		`read -r line
printf '{"output":"ok","breakdown":{"compute":"0.40 EUR","io":"0.10 EUR"}}\n'
`)
	// odd reports a currency the rates file has no rate for.
	plugin(t, plugins, "odd", `{"network":false,"filesystem":false}`, "read -r line\nprintf '{\"output\":\"ok\",\"cost\":\"0.10 GBP\"}\\n'\n")
	rates := filepath.Join(base, "rates.yaml")
	write(t, rates, `rates:
  - {from: EUR, to: USD, rate: "1.08", source: "ECB reference rate", at: "2026-11-25T14:15:00Z"}
`, 0o644)
	receipts := filepath.Join(base, "receipts")
	decl := readTools("priced", "odd", "ghost") + `grants:
  - {tool: ghost, max_cost_per_invocation: "0.10 USD"}
  - {tool: priced, max_cost_per_invocation: "1.00 USD", max_total_cost: "5.00 USD"}
  - {tool: odd, max_cost_per_invocation: "0.30 USD", max_total_cost: "5.00 USD"}
`
	url, stop := serve(t, base, plugins, decl, "--receipts", receipts, "--rates", rates)
	r := post(t, url, `{"tool":"priced","args":{"q":"x"}}`)
	// 0.50 EUR at 1.08 = 0.54 USD.
	if !r.OK || r.Charged == nil || r.Charged.Units != 54 {
		t.Fatalf("priced: %+v (charged %+v)", r, r.Charged)
	}
	// No GBP->USD rate: the hold settles at the reserved worst case.
	if r := post(t, url, `{"tool":"odd","args":{}}`); !r.OK || r.Charged == nil || r.Charged.Units != 30 {
		t.Fatalf("odd: %+v (charged %+v)", r, r.Charged)
	}
	// ghost has no plugin: its reservation is released (a reverse receipt).
	if r := post(t, url, `{"tool":"ghost","args":{}}`); r.OK {
		t.Fatalf("ghost: %+v", r)
	}
	stop()
	if out, err := exec.Command(klockBin, "receipts", "verify", receipts).CombinedOutput(); err != nil {
		t.Fatalf("klock receipts verify: %v\n%s", err, out)
	}
	var rec, odd *receipt.Receipt
	receipt.VerifyFile(filepath.Join(receipts, "receipts.jsonl"), nil, func(x *receipt.Receipt) error {
		if x.Phase == receipt.PhaseReconcile && x.ToolName == "priced" {
			rec = x
		}
		if x.Phase == receipt.PhaseReconcile && x.ToolName == "odd" {
			odd = x
		}
		return nil
	})
	// Every receipt names the manifest, the pre-charges and reversals too.
	reversed := 0
	receipt.VerifyFile(filepath.Join(receipts, "receipts.jsonl"), nil, func(x *receipt.Receipt) error {
		if !strings.HasPrefix(x.PolicyHash, "sha256:") {
			t.Errorf("receipt %d (%s) has no policy_hash", x.Seq, x.Phase)
		}
		if x.Phase == receipt.PhaseReverse {
			reversed++
		}
		return nil
	})
	if reversed != 1 {
		t.Errorf("%d reverse receipts, want ghost's one", reversed)
	}
	if odd == nil || odd.Metadata.Financial.Extra["settled_at"] != "reservation" || !strings.Contains(odd.Metadata.Financial.Extra["settled_why"], "GBP->USD") {
		t.Fatalf("the unconvertible cost's receipt: %+v", odd)
	}
	if rec == nil {
		t.Fatal("no reconcile receipt")
	}
	f := rec.Metadata.Financial
	ev := fmt.Sprint(rec.Evidence)
	switch {
	case string(f.CostBreakdown) != `{"compute":"0.40 EUR","io":"0.10 EUR"}`:
		t.Errorf("cost_breakdown %s", f.CostBreakdown)
	case f.OracleEvidence == nil || f.OracleEvidence.OracleSource != "ECB reference rate" || f.OriginalCost == nil || f.OriginalCost.Units != 50:
		t.Errorf("oracle evidence %+v original %+v", f.OracleEvidence, f.OriginalCost)
	case !strings.HasPrefix(rec.PolicyHash, "sha256:") || !strings.HasPrefix(rec.ContentHash, "sha256:"):
		t.Errorf("policy_hash %q content_hash %q", rec.PolicyHash, rec.ContentHash)
	case !strings.Contains(ev, "exchange-rate") || !strings.Contains(ev, "cost-source") || !strings.Contains(ev, "plugin priced"):
		t.Errorf("evidence %s", ev)
	}
}
