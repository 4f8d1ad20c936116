package etcdstore

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
)

// Await implements lease.Awaiter: a WAIT watches the lease keys from the
// revision it read and decides again on each deletion (a release, an
// expiry, a revoke), so no release between the read and the watch is
// missed. A DIE returns at once; so does a grant.
func (s *Store) Await(ctx context.Context, req lease.Request, max time.Duration) (lease.Decision, error) {
	if req.Age.IsZero() {
		req.Age = time.Now()
	}
	wctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	for {
		actx, cancel := bound(ctx)
		d, rev, err := s.acquire(actx, req)
		cancel()
		if err != nil || d.Outcome != lease.Wait {
			return d, err
		}
		if !s.waitDelete(wctx, rev) {
			return d, ctx.Err()
		}
	}
}

// waitDelete blocks until a lease key is deleted after rev; false when
// ctx ends first.
func (s *Store) waitDelete(ctx context.Context, rev int64) bool {
	wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), s.leasePrefix(), clientv3.WithPrefix(),
		clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	for r := range wch {
		if r.Err() != nil {
			return ctx.Err() == nil // compacted or lost leader: decide again
		}
		if len(r.Events) > 0 {
			return true
		}
	}
	return false
}

var _ lease.Awaiter = (*Store)(nil)
