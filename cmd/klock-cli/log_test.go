package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

// TestLogHTMLWithGuardRecords: klock log --html shows the gateway's calls
// and spend of the session's run (by default the session id) from a real
// audit log and receipt chain, and none of another run's; without them the
// page says no guard call was recorded; an altered audit log is refused.
func TestLogHTMLWithGuardRecords(t *testing.T) {
	dir := t.TempDir()
	const id = "20261128T100000-report"
	l := vlog.New(vlog.Session{ID: id, Agent: "refund-agent", ManifestPath: "agent.yaml", Mode: "strict", Start: time.Now()})
	l.Finish(time.Now(), vlog.Exit{Code: vlog.ExitCode(0)}, nil)
	sessions := filepath.Join(dir, "sessions")
	if _, err := l.Write(filepath.Join(sessions, id)); err != nil {
		t.Fatal(err)
	}

	auditPath := filepath.Join(dir, "gateway", "audit.jsonl")
	al, err := audit.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*audit.Record{
		{Event: audit.EventDispatch, CallID: "c1", RunID: id, Tool: "lookup_order", Verdict: "allow"},
		{Event: audit.EventResult, CallID: "c1", RunID: id, Tool: "lookup_order", Result: "ok"},
		{Event: audit.EventDecision, CallID: "c2", RunID: id, Tool: "issue_refund", Verdict: "deny", Check: "must_match", Reason: "order not the customer's"},
		{Event: audit.EventDispatch, CallID: "c3", RunID: "another-run", Tool: "delete_customer", Verdict: "allow"},
	} {
		if err := al.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	al.Close()

	receipts := filepath.Join(dir, "receipts.jsonl")
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, err := budget.Open(filepath.Join(dir, "ledger.db"), receipts, priv, budget.WithAgent("refund-agent"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k := budget.Key{Capability: "s", Grant: 0}
	s.Define(ctx, budget.Grant{Key: k, Tool: "model", Limits: budget.Limits{Currency: "USD"}})
	for _, run := range []string{id, id, "another-run"} {
		h, err := s.Reserve(ctx, budget.Request{Key: k, Cost: money.Amount{Units: 50, Currency: "USD"}})
		if err != nil {
			t.Fatal(err)
		}
		s.Reconcile(ctx, h.ID, budget.Settle{Actual: money.Amount{Units: 21, Currency: "USD"}, CostMeta: &receipt.Cost{RunID: run, Kind: receipt.KindModel}})
	}
	s.Close()

	out, code := run(t, "log", "--html", "--dir", sessions, "--audit", filepath.Dir(auditPath), "--receipts", receipts, id)
	if code != exitOK {
		t.Fatalf("klock log --html: %d\n%s", code, out)
	}
	for _, want := range []string{"lookup_order", "issue_refund", "order not the customer&#39;s", "0.42 USD"} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(out, "delete_customer") {
		t.Error("the page shows another run's call")
	}

	out, code = run(t, "log", "--html", "--dir", sessions, id)
	if code != exitOK || !strings.Contains(out, "No guard calls recorded for this session") {
		t.Errorf("without guard files: %d, want the guard section to say none were recorded", code)
	}

	data, _ := os.ReadFile(auditPath)
	os.WriteFile(auditPath, []byte(strings.Replace(string(data), "issue_refund", "issue_refunD", 1)), 0o600)
	if out, code = run(t, "log", "--html", "--dir", sessions, "--audit", auditPath, id); code != exitInvalid {
		t.Errorf("altered audit log: exit %d, want %d\n%.300s", code, exitInvalid, out)
	}
}
