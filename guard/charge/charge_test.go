package charge

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

const manifest = `apiVersion: klock/v1
agent: {id: charge-test}
mode: strict
intents: []
declared_tools:
  - {name: lookup, type: read, blast_radius: read, category: A, side_effects: READ}
  - {name: quote, type: read, blast_radius: read, category: A, side_effects: READ}
  - {name: free, type: read, blast_radius: read, category: A, side_effects: READ}
  - {name: priced, type: read, blast_radius: read, category: A, side_effects: READ, cost_per_invocation: "0.03 USD"}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
grants:
  - {tool: lookup, max_invocations: 2}
  - {tool: quote, max_cost_per_invocation: "0.05 USD", max_total_cost: "0.10 USD"}
  - {tool: priced, max_total_cost: "1.00 USD"}
`

type env struct {
	gw    *gateway.Gateway
	store *budget.Store
	chain string
	pub   ed25519.PublicKey
}

func open(t *testing.T) *env { t.Helper(); return openWith(t) }

func openWith(t *testing.T, opts ...Option) *env {
	t.Helper()
	dir := t.TempDir()
	mp := filepath.Join(dir, "m.yaml")
	if err := writeFile(mp, manifest); err != nil {
		t.Fatal(err)
	}
	m, err := policy.Load(mp)
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	chain := filepath.Join(dir, "receipts.jsonl")
	store, err := budget.Open(filepath.Join(dir, "ledger.db"), chain, priv, budget.WithAgent(m.Agent.ID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ch, err := New(context.Background(), m, store, m.Agent.ID, opts...)
	if err != nil {
		t.Fatal(err)
	}
	gw, st, err := gateway.Open(m, gateway.Layout{Dir: filepath.Join(dir, "state"), Agent: m.Agent.ID}, "", nil, gateway.WithCharger(ch))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return &env{gw: gw, store: store, chain: chain, pub: pub}
}

func ok(cost *check.Usage) gateway.Dispatch {
	return func(context.Context) (gateway.Outcome, error) {
		o := gateway.Outcome{Result: json.RawMessage(`{"v":1}`)}
		if cost != nil {
			o.Usage = *cost
		}
		return o, nil
	}
}

func (e *env) receipts(t *testing.T) []*receipt.Receipt {
	t.Helper()
	if err := e.store.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var out []*receipt.Receipt
	if _, err := receipt.VerifyFile(e.chain, e.pub, func(r *receipt.Receipt) error { out = append(out, r); return nil }); err != nil {
		t.Fatalf("receipt chain: %v", err)
	}
	return out
}

func TestMaxInvocationsRefusesTheThirdCallWithReceipts(t *testing.T) {
	e := open(t)
	for i := 0; i < 2; i++ {
		if _, te := e.gw.Call(context.Background(), &check.Call{Tool: "lookup", Args: map[string]any{}}, ok(nil)); te != nil {
			t.Fatalf("call %d: %v", i, te)
		}
	}
	ran := false
	_, te := e.gw.Call(context.Background(), &check.Call{Tool: "lookup", Args: map[string]any{}}, func(context.Context) (gateway.Outcome, error) {
		ran = true
		return gateway.Outcome{}, nil
	})
	if te == nil || te.Class != toolerr.Restricted || te.Reason != "budget" || te.Check != "budget" || !strings.Contains(te.Message, "max_invocations") || ran {
		t.Fatalf("third call: %+v (ran %v)", te, ran)
	}
	// An ungranted tool is not charged.
	if out, te := e.gw.Call(context.Background(), &check.Call{Tool: "free", Args: map[string]any{}}, ok(nil)); te != nil || out.Charged != nil {
		t.Fatalf("free: %v %+v", te, out.Charged)
	}
	var allow, deny, unavailable int
	for _, r := range e.receipts(t) {
		if r.ToolName != "lookup" {
			t.Fatalf("receipt for %s", r.ToolName)
		}
		switch {
		case r.Phase == receipt.PhasePreCharge && r.Decision.Verdict == receipt.Allow:
			allow++
		case r.Phase == receipt.PhasePreCharge && r.Decision.Verdict == receipt.Deny:
			deny++
		case r.Phase == receipt.PhaseReconcile && r.Metadata.Cost.Actual.Source == "unavailable" && r.Metadata.Cost.Actual.UnavailableReason != "":
			unavailable++
		}
	}
	if allow != 2 || deny != 1 || unavailable != 2 {
		t.Fatalf("receipts: %d allow, %d deny, %d unavailable reconciles", allow, deny, unavailable)
	}
}

func TestTotalCostReconcileReleaseAndLedgerFailure(t *testing.T) {
	e := open(t)
	call := func(d gateway.Dispatch) (gateway.Outcome, *toolerr.Error) {
		return e.gw.Call(context.Background(), &check.Call{Tool: "quote", Args: map[string]any{}}, d)
	}
	// Reported 0.01 USD: 0.05 reserved, 0.04 credited back.
	out, te := call(ok(&check.Usage{CostUnits: 1, Currency: "USD", Known: true, TokensUsed: 7}))
	if te != nil || out.Charged == nil || out.Charged.Units != 1 || out.Charged.Source != "harness-reported" {
		t.Fatalf("reported: %v %+v", te, out.Charged)
	}
	// A call that could not be started is released, not charged.
	_, te = call(func(context.Context) (gateway.Outcome, error) {
		return gateway.Outcome{}, errors.Join(gateway.ErrNotDispatched, errors.New("no such plugin"))
	})
	if te == nil {
		t.Fatal("failed dispatch succeeded")
	}
	// A timeout keeps the reservation: 0.01 + 0.05 = 0.06.
	_, te = call(func(ctx context.Context) (gateway.Outcome, error) {
		return gateway.Outcome{}, errors.New("tool crashed")
	})
	if te == nil {
		t.Fatal("crash succeeded")
	}
	u, err := e.store.Usage(context.Background(), budget.Key{Capability: "charge-test", Grant: 1})
	if err != nil || u.Charged.Units != 6 || u.Invocations != 2 || u.OpenHolds != 0 {
		t.Fatalf("usage after reconcile/release/crash: %+v %v", u, err)
	}
	// 0.06 + 0.05 = 0.11 > 0.10: refused by max_total_cost.
	_, te = call(ok(nil))
	if te == nil || te.Reason != "budget" || !strings.Contains(te.Message, "max_total_cost") {
		t.Fatalf("over total: %+v", te)
	}
	// A ledger that cannot be written refuses (never fails open).
	e.store.Close()
	ran := false
	_, te = e.gw.Call(context.Background(), &check.Call{Tool: "lookup", Args: map[string]any{}}, func(context.Context) (gateway.Outcome, error) {
		ran = true
		return gateway.Outcome{}, nil
	})
	if te == nil || te.Class != toolerr.InternalError || ran {
		t.Fatalf("closed ledger: %+v (ran %v)", te, ran)
	}
	t.Logf("closed ledger: %s", te.Message)
}
