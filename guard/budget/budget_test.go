package budget

import (
	"errors"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

func refundGrant() Grant {
	return Grant{Key: Key{"cap-1", 0}, Tool: "issue_refund", Server: "srv-payments",
		Limits: Limits{Currency: "USD", PerInvocation: u(5000), Total: u(15000), MaxInvocations: 3}}
}

func TestPreChargeReconcileReverseAndLimits(t *testing.T) {
	f := newFixture(t)
	s := f.open(t)
	g := refundGrant()
	if err := s.Define(ctx, g); err != nil {
		t.Fatal(err)
	}
	// Pre-charge of the worst case (no cost given: max_cost_per_invocation).
	h1, err := s.Reserve(ctx, Request{Key: g.Key})
	if err != nil || h1.Reserved != usd(5000) {
		t.Fatalf("reserve: %+v %v", h1, err)
	}
	// Reconcile cheaper: credit back.
	st, err := s.Reconcile(ctx, h1.ID, Settle{Actual: usd(1200)})
	if err != nil || st.Credit != 3800 || st.Status != receipt.Settled {
		t.Fatalf("reconcile: %+v %v", st, err)
	}
	if _, err := s.Reconcile(ctx, h1.ID, Settle{Actual: usd(1)}); !errors.Is(err, ErrHoldNotOpen) {
		t.Fatalf("second reconcile: %v", err)
	}
	// Over the per-call limit.
	_, err = s.Reserve(ctx, Request{Key: g.Key, Cost: usd(5001)})
	var de *DenyError
	if !errors.As(err, &de) || de.Limit != LimitPerInvocation || de.Receipt == nil {
		t.Fatalf("per-call: %v", err)
	}
	// A hold reversed by a later guard costs nothing and frees its invocation.
	h2, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(5000)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, h2.ID, "secret-leak guard denied", "secret-leak"); err != nil {
		t.Fatal(err)
	}
	// Overrun: charged in full, settlement failed.
	h3, _ := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(4000)})
	st, err = s.Reconcile(ctx, h3.ID, Settle{Actual: usd(4500)})
	if err != nil || st.Overrun != 500 || st.Status != receipt.Failed {
		t.Fatalf("overrun: %+v %v", st, err)
	}
	// 1200 + 4500 charged; 9300 left, 2 of 3 calls used.
	if _, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(5000)}); err != nil {
		t.Fatalf("third call: %v", err)
	}
	_, err = s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)})
	if !errors.As(err, &de) || de.Limit != LimitInvocations {
		t.Fatalf("fourth call: %v", err)
	}
	use, _ := s.Usage(ctx, g.Key)
	if use.Charged != usd(10700) || use.Invocations != 3 || use.OpenHolds != 1 {
		t.Fatalf("usage %+v", use)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The state survives a restart, and the receipts add up to it.
	s = f.open(t)
	defer s.Close()
	use, _ = s.Usage(ctx, g.Key)
	if use.Charged != usd(10700) || use.Invocations != 3 {
		t.Fatalf("after restart %+v", use)
	}
	charged, inv, n := f.ledgerFromReceipts(t)
	if charged[g.Key] != 10700 || inv[g.Key] != 3 || n != 9 {
		t.Fatalf("receipts: charged %d inv %d n %d", charged[g.Key], inv[g.Key], n)
	}
}

func TestTotalLimit(t *testing.T) {
	f := newFixture(t)
	s := f.open(t, WithGroupCommit(8))
	defer s.Close()
	g := Grant{Key: Key{"c", 1}, Tool: "t", Limits: Limits{Currency: "JPY", Total: u(100)}}
	s.Define(ctx, g)
	if _, err := s.Reserve(ctx, Request{Key: g.Key, Cost: money.Amount{Units: 60, Currency: "JPY"}}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Reserve(ctx, Request{Key: g.Key, Cost: money.Amount{Units: 41, Currency: "JPY"}})
	var de *DenyError
	if !errors.As(err, &de) || de.Limit != LimitTotal || *de.Receipt.Metadata.Financial.AttemptedCost != 41 {
		t.Fatalf("over total: %v", err)
	}
	if _, err := s.Reserve(ctx, Request{Key: g.Key, Cost: money.Amount{Units: 40, Currency: "JPY"}}); err != nil {
		t.Fatalf("exactly to the total: %v", err)
	}
	if _, err := s.Reserve(ctx, Request{Key: Key{"nope", 0}}); !errors.Is(err, ErrUnknownGrant) {
		t.Fatalf("unknown grant: %v", err)
	}
}

func TestDelegationOnlyTightensAndChargesTheParent(t *testing.T) {
	f := newFixture(t)
	s := f.open(t)
	defer s.Close()
	root := Grant{Key: Key{"orchestrator", 0}, Tool: "generate_text", Limits: Limits{Currency: "USD", PerInvocation: u(100), Total: u(1000), MaxInvocations: 200}}
	if err := s.Define(ctx, root); err != nil {
		t.Fatal(err)
	}
	childLimits, err := root.Limits.Attenuate(ReduceTotalCost(500), ReduceCostPerInvocation(50), ReduceMaxInvocations(50))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]Attenuation{{ReduceTotalCost(1001)}, {ReduceCostPerInvocation(101)}, {ReduceMaxInvocations(201)}, {ReduceMaxInvocations(0)}} {
		if _, err := root.Limits.Attenuate(bad...); !errors.Is(err, ErrWiden) {
			t.Errorf("attenuation %+v widened: %v", bad, err)
		}
	}
	wide := childLimits
	wide.Total = nil
	if err := s.Define(ctx, Grant{Key: Key{"research", 0}, Parent: &root.Key, Limits: wide}); !errors.Is(err, ErrWiden) {
		t.Fatalf("issuing a child without the parent's total: %v", err)
	}
	child := Grant{Key: Key{"research", 0}, Parent: &root.Key, Limits: childLimits}
	if err := s.Define(ctx, child); err != nil {
		t.Fatal(err)
	}
	// Spend 960 at the root; the child may spend only what the root has left.
	for i := 0; i < 9; i++ {
		h, err := s.Reserve(ctx, Request{Key: root.Key, Cost: usd(100)})
		if err != nil {
			t.Fatal(err)
		}
		s.Reconcile(ctx, h.ID, Settle{Actual: usd(100)})
	}
	h, _ := s.Reserve(ctx, Request{Key: root.Key, Cost: usd(100)})
	s.Reconcile(ctx, h.ID, Settle{Actual: usd(60)})
	_, err = s.Reserve(ctx, Request{Key: child.Key, Cost: usd(50)})
	var de *DenyError
	if !errors.As(err, &de) || de.Holder != root.Key || de.Limit != LimitTotal {
		t.Fatalf("child spending past the root's total: %v", err)
	}
	hc, err := s.Reserve(ctx, Request{Key: child.Key, Cost: usd(40)})
	if err != nil {
		t.Fatal(err)
	}
	if f := hc.Receipt.Metadata.Financial; f.DelegationDepth != 1 || f.RootBudgetHolder != "orchestrator" || f.ParentGrant != "orchestrator#0" {
		t.Fatalf("child receipt %+v", hc.Receipt.Metadata.Financial)
	}
	ru, _ := s.Usage(ctx, root.Key)
	if ru.Charged != usd(1000) || ru.Invocations != 11 {
		t.Fatalf("root usage %+v", ru)
	}
	// The issued child is defined again (a restart) although the root has
	// less left now; a new child is issued only within what is left.
	if err := s.Define(ctx, child); err != nil {
		t.Fatalf("the same child again: %v", err)
	}
	late := Grant{Key: Key{"late", 0}, Parent: &root.Key, Limits: Limits{Currency: "USD", PerInvocation: u(50), Total: u(10), MaxInvocations: 5}}
	if err := s.Define(ctx, late); !errors.Is(err, ErrWiden) || !strings.Contains(err.Error(), "remaining 0.00 USD") {
		t.Fatalf("a child issued past what the root has left: %v", err)
	}
}

func TestParseKey(t *testing.T) {
	if k, err := ParseKey("team#a#3"); err != nil || k != (Key{"team#a", 3}) {
		t.Fatalf("ParseKey: %v %v", k, err)
	}
	for _, bad := range []string{"team", "#1", "team#", "team#x", "team#99999999999"} {
		if _, err := ParseKey(bad); !errors.Is(err, ErrBadRequest) {
			t.Errorf("ParseKey(%q): %v", bad, err)
		}
	}
}

func TestCrossCurrencyCarriesEvidence(t *testing.T) {
	rates, err := NewRateTable("ops-rates-2026-11", 1763769600, money.Rate{From: "USDC", To: "USD", Numerator: 1, Denominator: 1, MarginBPS: 100})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	s := f.open(t, WithRates(rates))
	defer s.Close()
	g := Grant{Key: Key{"c", 0}, Tool: "t", Limits: Limits{Currency: "USD", Total: u(1000)}}
	s.Define(ctx, g)
	// 1.500000 USDC with a 1 % margin: 151.5 cents, rounded up to 152.
	h, err := s.Reserve(ctx, Request{Key: g.Key, Cost: money.Amount{Units: 1_500_000, Currency: "USDC"}})
	if err != nil || h.Reserved != usd(152) {
		t.Fatalf("reserve: %+v %v", h, err)
	}
	ev := h.Receipt.Metadata.Financial.OracleEvidence
	if ev == nil || ev.FromCurrency != "USDC" || ev.MarginBPS != 100 || ev.OracleSource != "ops-rates-2026-11" {
		t.Fatalf("evidence %+v", ev)
	}
	_, err = s.Reserve(ctx, Request{Key: g.Key, Cost: money.Amount{Units: 1, Currency: "EUR"}})
	var de *DenyError
	if !errors.As(err, &de) || de.Limit != LimitCurrency {
		t.Fatalf("no EUR rate: %v", err)
	}
}

func TestRedefiningWithOtherLimitsIsRefused(t *testing.T) {
	f := newFixture(t)
	s := f.open(t)
	defer s.Close()
	g := refundGrant()
	s.Define(ctx, g)
	if err := s.Define(ctx, g); err != nil {
		t.Fatalf("identical redefinition: %v", err)
	}
	g.Limits.MaxInvocations = 4
	if err := s.Define(ctx, g); !errors.Is(err, ErrGrantChanged) {
		t.Fatalf("changed limits: %v", err)
	}
}

func TestSecondOwnerIsRefused(t *testing.T) {
	f := newFixture(t)
	s := f.open(t)
	defer s.Close()
	s.Define(ctx, refundGrant())
	if s2, err := Open(f.db, f.dir+"/other.jsonl", f.priv); !errors.Is(err, ErrLedger) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("a second process-level owner opened the ledger: %v", err)
	}
}
