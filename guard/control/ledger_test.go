package control

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/money"
)

// TestLedgerOverTheSocket: a sub-agent's gateway charges its delegated
// grant in the parent's ledger over the control socket, with the budget's
// typed errors; the socket serves delegation only (no root grant defined,
// no root grant charged, a hold settled once).
func TestLedgerOverTheSocket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	store, err := budget.Open(filepath.Join(dir, "ledger.db"), filepath.Join(dir, "receipts.jsonl"), priv)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	u := func(v uint64) *uint64 { return &v }
	root := budget.Grant{Key: budget.Key{Capability: "parent", Grant: 0}, Tool: "quote", Limits: budget.Limits{Currency: "USD", PerInvocation: u(40), Total: u(100)}}
	if err := store.Define(ctx, root); err != nil {
		t.Fatal(err)
	}
	m, err := policy.Parse("m.yaml", []byte(`apiVersion: klock/v1
agent: {id: parent}
intents: []
declared_tools: []
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := check.New(m)
	sock := filepath.Join(dir, "c.sock")
	stop, err := Serve(ctx, sock, p, WithLedger(store))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	l := Dial(sock).Ledger()
	if err := l.Define(ctx, budget.Grant{Key: budget.Key{Capability: "rogue"}, Limits: budget.Limits{Currency: "USD"}}); !errors.Is(err, ErrNotDelegated) {
		t.Fatalf("a root grant defined over the socket: %v", err)
	}
	if _, err := l.Reserve(ctx, budget.Request{Key: root.Key}); !errors.Is(err, ErrNotDelegated) {
		t.Fatalf("the parent's own grant charged over the socket: %v", err)
	}
	wide := budget.Grant{Key: budget.Key{Capability: "child"}, Parent: &root.Key, Limits: budget.Limits{Currency: "USD", PerInvocation: u(40), Total: u(200)}}
	if err := l.Define(ctx, wide); !errors.Is(err, budget.ErrWiden) {
		t.Fatalf("a widening child: %v", err)
	}
	child := budget.Grant{Key: budget.Key{Capability: "child"}, Parent: &root.Key, Tool: "quote", Limits: budget.Limits{Currency: "USD", PerInvocation: u(40), Total: u(60)}}
	if err := l.Define(ctx, child); err != nil {
		t.Fatal(err)
	}
	h, err := l.Reserve(ctx, budget.Request{Key: child.Key, AgentID: "child"})
	if err != nil || h.Reserved.Units != 40 || h.Receipt == nil || h.Receipt.Metadata.Financial.ParentGrant != "parent#0" {
		t.Fatalf("reserve: %+v %v", h, err)
	}
	if _, err := l.Reconcile(ctx, h.ID, budget.Settle{Actual: money.Amount{Units: 30, Currency: "USD"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reconcile(ctx, h.ID, budget.Settle{Actual: money.Amount{Units: 30, Currency: "USD"}}); !errors.Is(err, ErrNotDelegated) {
		t.Fatalf("a hold settled twice: %v", err)
	}
	_, err = l.Reserve(ctx, budget.Request{Key: child.Key})
	var de *budget.DenyError
	if !errors.As(err, &de) || de.Limit != budget.LimitTotal || de.Receipt == nil || !errors.Is(err, budget.ErrDenied) {
		t.Fatalf("past the child's total: %v", err)
	}
	if us, _ := store.Usage(ctx, root.Key); us.Charged.Units != 30 {
		t.Fatalf("the parent was charged %d, want the child's 30", us.Charged.Units)
	}
}
