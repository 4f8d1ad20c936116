package fleetbudget

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/internal/etcdtest"
)

// pay is the grant both hosts' gateways charge: the same manifest, so the
// same key (session, index) on every host.
var pay = budget.Grant{Key: budget.Key{Capability: "agent-7", Grant: 0}, Tool: "pay",
	Limits: budget.Limits{Currency: "USD", PerInvocation: u(5), Total: u(40_000), MaxInvocations: 12_000}}

const callers, calls = 64, 1000

// TestFleetChargesExactlyTheGrant: 64 callers on two hosts make 64,000
// calls against a grant of 12,000 invocations; the fleet charges exactly
// 12,000 and never more than max_total_cost, with and without the etcd
// leader killed (SIGKILL) mid-run, and the hosts' receipts add up to the
// fleet ledger in etcd.
func TestFleetChargesExactlyTheGrant(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run(fmt.Sprintf("killLeader=%v", kill), func(t *testing.T) { runFleet(t, kill) })
	}
}

type outcome struct{ allowed, denied, unavailable atomic.Int64 }

func runFleet(t *testing.T, killLeader bool) {
	c := etcdtest.Start(t, 3)
	cli := c.Client(t)
	hosts := []*host{newHost(t, "hostA", ""), newHost(t, "hostB", "")}
	for _, h := range hosts {
		h.open(t, cli, WithBlock(256))
		if err := h.led.Define(ctx, pay); err != nil {
			t.Fatal(err)
		}
	}
	var out outcome
	var killed *etcdtest.Member
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() {
			if killed = c.Leader(ctx, cli); killed == nil {
				t.Error("no etcd leader to kill")
				return
			}
			killed.Kill()
		})
	}
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(h *host) {
			defer wg.Done()
			for j := 0; j < calls; j++ {
				n, ok := call(t, h, j, &out)
				if !ok {
					return
				}
				if killLeader && n == int64(pay.Limits.MaxInvocations/4) {
					kill()
				}
			}
		}(hosts[i%2])
	}
	wg.Wait()
	if killLeader && (killed == nil || !killed.Killed) {
		t.Fatal("the leader was not killed")
	}
	t.Logf("allowed %d, denied %d, refused for etcd %d", out.allowed.Load(), out.denied.Load(), out.unavailable.Load())
	if got := out.allowed.Load(); got != int64(pay.Limits.MaxInvocations) {
		t.Errorf("the fleet allowed %d calls of a grant of %d invocations", got, pay.Limits.MaxInvocations)
	}
	checkLedger(t, hosts, pay, pay.Limits.MaxInvocations)
}

// call makes one Reserve and Reconcile (actual 1..5 of the 5 reserved);
// it returns the allowed count after it, and false on an unexpected error.
func call(t *testing.T, h *host, j int, out *outcome) (int64, bool) {
	hold, err := h.led.Reserve(ctx, budget.Request{Key: pay.Key, Tool: "pay"})
	switch {
	case err == nil:
	case errors.Is(err, budget.ErrDenied):
		var de *budget.DenyError
		if !errors.As(err, &de) || de.Receipt == nil {
			t.Errorf("a refusal without its receipt: %v", err)
			return 0, false
		}
		out.denied.Add(1)
		return out.allowed.Load(), true
	case errors.Is(err, ErrUnavailable) && errors.Is(err, budget.ErrLedger):
		out.unavailable.Add(1)
		return out.allowed.Load(), true
	default:
		t.Errorf("%s: Reserve: %v", h.name, err)
		return 0, false
	}
	n := out.allowed.Add(1)
	if _, err := h.led.Reconcile(ctx, hold.ID, budget.Settle{Actual: usd(1 + uint64(j%5))}); err != nil {
		t.Errorf("%s: Reconcile: %v", h.name, err)
		return 0, false
	}
	return n, true
}

// checkLedger closes the hosts (returning their blocks) and checks the
// fleet ledger: invocations as expected, money within the grant, nothing
// left allocated, and the receipts adding up to it.
func checkLedger(t *testing.T, hosts []*host, g budget.Grant, wantInv uint64) {
	t.Helper()
	for _, h := range hosts {
		h.close(t)
	}
	fl, err := ReadLedger(ctx, hosts[0].led.cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	r := fl[g.Key]
	if r == nil {
		t.Fatal("no fleet record of the grant")
	}
	inv, units := r.Used()
	allocInv, allocUnits := r.allocated("")
	t.Logf("fleet ledger: %d invocations, %d units used; allocated %d, %d", inv, units, allocInv, allocUnits)
	if inv != wantInv {
		t.Errorf("fleet ledger: %d invocations used, want %d", inv, wantInv)
	}
	if units > *g.Limits.Total {
		t.Errorf("fleet ledger: %d units charged, over max_total_cost %d", units, *g.Limits.Total)
	}
	if allocInv != inv || allocUnits != units {
		t.Errorf("closed hosts still hold blocks: allocated %d/%d, used %d/%d", allocInv, allocUnits, inv, units)
	}
	// Each chain verifies on its own core; the sums merge after.
	tallies := make([]Tally, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		tallies[i] = Tally{}
		wg.Add(1)
		go func() { defer wg.Done(); h.tally(t, tallies[i]) }()
	}
	wg.Wait()
	tally := Tally{}
	for _, tl := range tallies {
		for k, s := range tl {
			if tally[k] == nil {
				tally[k] = &Sum{}
			}
			tally[k].Invocations += s.Invocations
			tally[k].Units += s.Units
		}
	}
	lines, err := Compare(tally, fl)
	for _, l := range lines {
		t.Log(l)
	}
	if err != nil {
		t.Fatal(err)
	}
}
