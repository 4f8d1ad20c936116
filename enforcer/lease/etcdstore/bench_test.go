package etcdstore

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/internal/etcdtest"
	"github.com/klocklabs/klock/internal/testutil"
)

// BenchmarkFleetGrantRelease: a one-claim grant and its release through
// the store, against a bare etcd txn of the same size (a range read, one
// fenced put, one delete), on one local member, in the same run.
func BenchmarkFleetGrantRelease(b *testing.B) {
	testutil.RequirePrivileged(b)
	c := etcdtest.Start(b, 1)
	cli := c.Client(b)
	ctx := context.Background()
	b.Run("store", func(b *testing.B) {
		s := New(cli, "/bench", "h")
		defer s.Close()
		cl := claim(b, "MUTATES FILE:/repo/src/**")
		for i := 0; b.Loop(); i++ {
			h := lease.Holder{Agent: "a", Session: fmt.Sprint("s", i)}
			d, err := s.Acquire(ctx, lease.Request{Holder: h, Claims: []lease.Claim{cl}})
			if err != nil || d.Outcome != lease.Granted {
				b.Fatal(d.Outcome, err)
			}
			if _, err := s.Release(ctx, h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare-txn", func(b *testing.B) {
		for b.Loop() {
			r, err := cli.Get(ctx, "/bare/lease/", clientv3.WithPrefix())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := cli.Txn(ctx).If(fence("/bare/lease/", r.Header.Revision)).
				Then(clientv3.OpPut("/bare/lease/x", "v")).Commit(); err != nil {
				b.Fatal(err)
			}
			if _, err := cli.Delete(ctx, "/bare/lease/x"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
