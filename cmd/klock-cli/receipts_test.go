package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

func TestReceiptsVerifyAndReport(t *testing.T) {
	dir := t.TempDir()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, err := budget.Open(filepath.Join(dir, "ledger.db"), filepath.Join(dir, "receipts.jsonl"), priv, budget.WithAgent("spender"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k := budget.Key{Capability: "s", Grant: 0}
	s.Define(ctx, budget.Grant{Key: k, Tool: "model", Limits: budget.Limits{Currency: "USD"}})
	for i := 0; i < 3; i++ {
		h, err := s.Reserve(ctx, budget.Request{Key: k, Cost: money.Amount{Units: 10, Currency: "USD"}})
		if err != nil {
			t.Fatal(err)
		}
		s.Reconcile(ctx, h.ID, budget.Settle{Actual: money.Amount{Units: 9, Currency: "USD"}, CostMeta: &receipt.Cost{
			Actual: &receipt.Actual{TokensOut: 2500, Source: "api-usage"}, Exceeded: []string{"max_tokens_out: 2500 > 2000"}}})
	}
	s.Close()

	out, code := run(t, "receipts", "verify", dir)
	if code != exitOK || !strings.Contains(out, "6 receipts") {
		t.Fatalf("verify: %d %s", code, out)
	}
	out, code = run(t, "report", dir)
	if code != exitOK || !strings.Contains(out, "FLAGGED spender: 3 of 3") {
		t.Fatalf("report: %d %s", code, out)
	}
	chain := filepath.Join(dir, "receipts.jsonl")
	data, _ := os.ReadFile(chain)
	i := strings.Index(string(data), `"ledger_debit":10`)
	data[i+len(`"ledger_debit":`)] = '9'
	os.WriteFile(chain, data, 0o600)
	out, code = run(t, "receipts", "verify", dir)
	if code != exitInvalid {
		t.Fatalf("tampered chain: %d %s", code, out)
	}
}

// klock receipts verify checks a Chio-format receipt (the
// seed's example, signed) and refuses an altered one.
func TestReceiptsVerifyChio(t *testing.T) {
	fixture := filepath.Join("..", "..", "guard", "receipt", "testdata", "chio-receipt.json")
	out, code := run(t, "receipts", "verify", fixture)
	if code != exitOK || !strings.Contains(out, "1 Chio-format receipt") {
		t.Fatalf("verify: %d %s", code, out)
	}
	data, _ := os.ReadFile(fixture)
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(strings.Replace(string(data), `"cost_charged": 150`, `"cost_charged": 15`, 1)), 0o600)
	if out, code := run(t, "receipts", "verify", bad); code != exitInvalid {
		t.Fatalf("altered receipt: %d %s", code, out)
	}
}
