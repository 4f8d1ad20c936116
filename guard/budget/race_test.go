package budget

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// 64 concurrent callers x 10,000 calls against one grant. Durability is off
// (the assertion is about atomicity, which WithoutSync does not change).
func TestRaceOneGrantNeverOverspends(t *testing.T) {
	callers, calls := 64, raceCalls
	const total, maxInv = 40_000, 4_000
	f := newFixture(t)
	s := f.open(t, WithGroupCommit(256), WithoutSync())
	g := Grant{Key: Key{"race", 0}, Tool: "t", Limits: Limits{Currency: "USD", PerInvocation: u(10), Total: u(total), MaxInvocations: maxInv}}
	if err := s.Define(ctx, g); err != nil {
		t.Fatal(err)
	}
	var charged, invocations, allowed, denied atomic.Int64
	var worstSeen atomic.Uint64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				cost := uint64(1 + (w+i)%10)
				h, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(cost)})
				var de *DenyError
				if errors.As(err, &de) {
					denied.Add(1)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				allowed.Add(1)
				fin := h.Receipt.Metadata.Financial
				if used := uint64(fin.InvocationsUsed); used > worstSeen.Load() {
					worstSeen.Store(used) // racy max is fine: checked below against the limit
				}
				if fin.InvocationsUsed > maxInv || fin.BudgetRemaining == nil {
					t.Errorf("decision saw %d invocations / remaining %v", fin.InvocationsUsed, fin.BudgetRemaining)
				}
				switch i % 4 {
				case 0: // a later guard denies: full reversal
					if _, err := s.Release(ctx, h.ID, "guard", "test"); err != nil {
						t.Error(err)
					}
				case 1: // cheaper than reserved: credit back one unit
					if _, err := s.Reconcile(ctx, h.ID, Settle{Actual: usd(cost - 1)}); err != nil {
						t.Error(err)
					}
					charged.Add(int64(cost - 1))
					invocations.Add(1)
				default:
					if _, err := s.Reconcile(ctx, h.ID, Settle{Actual: usd(cost)}); err != nil {
						t.Error(err)
					}
					charged.Add(int64(cost))
					invocations.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	use, err := s.Usage(ctx, g.Key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d decisions in %v: %d allowed, %d denied; ledger %v in %d invocations",
		allowed.Load()+denied.Load(), elapsed, allowed.Load(), denied.Load(), use.Charged, use.Invocations)
	if use.Charged.Units > total || use.Invocations > maxInv || worstSeen.Load() > maxInv {
		t.Fatalf("overspent: %v in %d invocations (limits %d, %d)", use.Charged, use.Invocations, total, maxInv)
	}
	if use.Charged.Units != uint64(charged.Load()) || use.Invocations != uint64(invocations.Load()) {
		t.Fatalf("ledger %v / %d, callers were granted %d / %d", use.Charged, use.Invocations, charged.Load(), invocations.Load())
	}
	// The budget is used up to the unit: one more invocation or one more
	// cent would pass a limit.
	if use.Invocations != maxInv && total-use.Charged.Units >= 1 {
		if _, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)}); err == nil {
			t.Fatalf("limits not reached after %d calls: %v in %d invocations", callers*calls, use.Charged, use.Invocations)
		}
	}
	if denied.Load() == 0 {
		t.Fatal("no call was denied: the test did not reach the limits")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

var raceCalls = 10_000
