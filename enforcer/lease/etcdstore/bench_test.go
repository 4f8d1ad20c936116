package etcdstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/internal/etcdtest"
	"github.com/klocklabs/klock/internal/testutil"
)

// fleetClients is the load of the fleet benchmark: 2 hosts x 8 clients.
const (
	fleetHosts   = 2
	fleetClients = 8
)

// BenchmarkFleetGrantRelease: one-claim grants and their releases through
// the store by 2 hosts x 8 clients (each host its own etcd client), on a
// 3-member loopback cluster, against bare etcd operations of the same
// shape (a range read, one fenced put, one delete) by as many clients in
// the same run. Each client works in its own directory, as sessions on
// disjoint parts of a repository do. It reports pairs/s, p50 and p99 per
// pair, and the store's rate as a ratio of the bare one (goal >= 0.7).
func BenchmarkFleetGrantRelease(b *testing.B) {
	testutil.RequirePrivileged(b)
	c := etcdtest.Start(b, 3)
	var clis []*clientv3.Client
	for range fleetHosts {
		clis = append(clis, c.Client(b))
	}
	var bare float64
	b.Run("bare-txn", func(b *testing.B) {
		bare = fleetLoad(b, func(h, i int) func(context.Context, int) error {
			cli := clis[h]
			prefix := "/bare/lease/"
			key := fmt.Sprintf("%sh%dc%d", prefix, h, i)
			return func(ctx context.Context, _ int) error {
				r, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
				if err != nil {
					return err
				}
				if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "<", r.Header.Revision+1)).
					Then(clientv3.OpPut(key, "v")).Commit(); err != nil {
					return err
				}
				_, err = cli.Delete(ctx, key)
				return err
			}
		})
	})
	b.Run("store", func(b *testing.B) {
		stores := make([]*Store, fleetHosts)
		for h := range stores {
			stores[h] = New(clis[h], "/bench", fmt.Sprint("host", h))
			defer stores[h].Close()
		}
		rate := fleetLoad(b, func(h, i int) func(context.Context, int) error {
			s := stores[h]
			cl := claim(b, fmt.Sprintf("MUTATES FILE:/repo/h%d/c%d/**", h, i))
			return func(ctx context.Context, n int) error {
				who := lease.Holder{Agent: "a", Session: fmt.Sprintf("h%dc%ds%d", h, i, n)}
				d, err := s.Acquire(ctx, lease.Request{Holder: who, Claims: []lease.Claim{cl}})
				if err != nil || d.Outcome != lease.Granted {
					return fmt.Errorf("%v %v", d.Outcome, err)
				}
				_, err = s.Release(ctx, who)
				return err
			}
		})
		if bare > 0 {
			b.ReportMetric(rate/bare, "x-bare")
		}
	})
}

// fleetLoad runs b.N operations spread over hosts x clients and reports
// the rate and the p50/p99 latency of one operation; it returns the rate.
func fleetLoad(b *testing.B, mk func(h, i int) func(context.Context, int) error) float64 {
	ctx := context.Background()
	per := max(b.N/(fleetHosts*fleetClients), 1)
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for h := range fleetHosts {
		for i := range fleetClients {
			op := mk(h, i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := make([]time.Duration, 0, per)
				for n := range per {
					t := time.Now()
					if err := op(ctx, n); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(t))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	rate := float64(len(lat)) / el.Seconds()
	b.ReportMetric(rate, "pairs/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
	return rate
}
