package fleetbudget

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/internal/etcdtest"
)

// BenchmarkFleetAuthorizations measures authorizations (Reserve, then
// Reconcile) per second through the fleet budget (a host's store shared
// through a 3-member etcd, blocks of 1024) against the same host's
// budget.Store alone, in the same run so the ratio holds on a shared
// machine (goal >= 0.5x). Run with -benchtime 1x (make bench does).
func BenchmarkFleetAuthorizations(b *testing.B) {
	c := etcdtest.Start(b, 3)
	cli := c.Client(b)
	for i := 0; i < b.N; i++ {
		g := budget.Grant{Key: budget.Key{Capability: fmt.Sprintf("bench-%d", i)}, Tool: "t",
			Limits: budget.Limits{Currency: "USD", PerInvocation: u(5), Total: u(1 << 40), MaxInvocations: 1 << 30}}
		h := newHost(b, "local", "")
		h.open(b, cli)
		local := authorize(b, h.store, g, 16, 20_000)
		h.close(b)
		f := newHost(b, "fleet", "")
		f.open(b, cli)
		fleet := authorize(b, f.led, g, 16, 20_000)
		f.close(b)
		b.ReportMetric(local, "local-auth/s")
		b.ReportMetric(fleet, "fleet-auth/s")
		b.ReportMetric(fleet/local, "ratio")
		fmt.Printf("authorizations (reserve + reconcile, 16 callers): fleet budget on 3-member etcd %.0f/s, one host's budget.Store %.0f/s: %.2fx\n",
			fleet, local, fleet/local)
	}
}

func authorize(b *testing.B, a budget.Authorizer, g budget.Grant, callers, total int) float64 {
	if err := a.(interface {
		Define(context.Context, budget.Grant) error
	}).Define(ctx, g); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := c; i < total; i += callers {
				h, err := a.Reserve(ctx, budget.Request{Key: g.Key})
				if err == nil {
					_, err = a.Reconcile(ctx, h.ID, budget.Settle{Actual: usd(3)})
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds()
}
