package etcdqueue

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/guard/approval"
)

// rewatch is the pause before watching again after a watch broke while
// etcd still answers reads (a compacted revision, a leader change).
const rewatch = 100 * time.Millisecond

// Wait implements approval.Queue: it watches the request's key, so a
// decision on any host wakes it; it wakes at the request's deadline too,
// to expire it. A read that fails returns the error (wrapping
// approval.ErrUnreachable when etcd did not answer).
func (q *Queue) Wait(ctx context.Context, id string, max time.Duration) (*approval.Request, error) {
	end := q.now().Add(max)
	for {
		rctx, cancel := q.ctx()
		s, err := q.current(rctx, id)
		cancel()
		if err != nil || s.r.State != approval.Pending || !q.now().Before(end) {
			return s.r, err
		}
		until := end
		if s.r.Deadline.Before(until) {
			until = s.r.Deadline
		}
		if !q.watch(ctx, id, s.rev, until.Sub(q.now())) {
			return s.r, nil
		}
	}
}

// watch blocks until the key changes after rev, d passes, or ctx ends
// (false: stop waiting).
func (q *Queue) watch(ctx context.Context, id string, rev int64, d time.Duration) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := q.cli.Watch(wctx, q.key(id), clientv3.WithRev(rev+1))
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case resp, ok := <-wch:
			if ok && resp.Err() == nil && len(resp.Events) == 0 {
				continue // a progress notification
			}
			if !ok || resp.Err() != nil {
				// Broken watch: the next read says whether etcd is gone.
				select {
				case <-ctx.Done():
					return false
				case <-time.After(rewatch):
				}
			}
			return true
		}
	}
}
