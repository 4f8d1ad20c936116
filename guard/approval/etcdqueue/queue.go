package etcdqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/guard/approval"
)

// maxTries bounds a read-check-commit loop under contention.
const maxTries = 32

// DefaultTimeout bounds one operation (a Wait's reads, not its wait).
const DefaultTimeout = 5 * time.Second

// DefaultRetain is how long a closed request stays in etcd.
const DefaultRetain = 24 * time.Hour

// Queue is an approval.Queue on etcd. Safe for concurrent use.
type Queue struct {
	cli     *clientv3.Client
	prefix  string // P/approval/
	host    string
	now     func() time.Time
	timeout time.Duration
	retain  time.Duration

	mu      sync.Mutex
	lease   clientv3.LeaseID // the retention lease of closed requests
	leaseAt time.Time
}

var _ approval.Queue = (*Queue)(nil)

// Option configures New.
type Option func(*Queue)

// WithClock sets the clock deadlines are judged by.
func WithClock(now func() time.Time) Option { return func(q *Queue) { q.now = now } }

// WithTimeout bounds each operation (default DefaultTimeout).
func WithTimeout(d time.Duration) Option { return func(q *Queue) { q.timeout = d } }

// WithRetain sets how long a closed request stays (default DefaultRetain).
func WithRetain(d time.Duration) Option { return func(q *Queue) { q.retain = d } }

// New is the queue under prefix (default /klock) of the cluster cli
// reaches; the requests it files name host.
func New(cli *clientv3.Client, prefix, host string, opts ...Option) *Queue {
	if prefix == "" {
		prefix = "/klock"
	}
	q := &Queue{cli: cli, prefix: strings.TrimRight(prefix, "/") + "/approval/", host: host,
		now: time.Now, timeout: DefaultTimeout, retain: DefaultRetain}
	for _, o := range opts {
		o(q)
	}
	return q
}

// String names the queue for messages.
func (q *Queue) String() string {
	return fmt.Sprintf("the fleet's queue %s on etcd %s (this host: %s)", q.prefix, strings.Join(q.cli.Endpoints(), ","), q.host)
}

func (q *Queue) key(id string) string { return q.prefix + id }

func (q *Queue) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), q.timeout)
}

func (q *Queue) unreachable(err error) error {
	return fmt.Errorf("%w: etcd %s: %v (check the cluster with etcdctl endpoint health)", approval.ErrUnreachable, strings.Join(q.cli.Endpoints(), ","), err)
}

// stored is a request and the mod revision it was read at.
type stored struct {
	r   *approval.Request
	rev int64
}

func decode(kv []byte, rev int64) (stored, error) {
	var r approval.Request
	if err := json.Unmarshal(kv, &r); err != nil {
		return stored{}, err
	}
	return stored{&r, rev}, nil
}

// get reads one request.
func (q *Queue) get(ctx context.Context, id string) (stored, error) {
	if !approval.ValidID(id) {
		return stored{}, fmt.Errorf("%w: %q (ids look like ap_0123456789ab)", approval.ErrNotFound, id)
	}
	resp, err := q.cli.Get(ctx, q.key(id))
	if err != nil {
		return stored{}, q.unreachable(err)
	}
	if len(resp.Kvs) == 0 {
		return stored{}, fmt.Errorf("%w: %s", approval.ErrNotFound, id)
	}
	s, err := decode(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	if err != nil {
		return stored{}, fmt.Errorf("%w: %s: %v", approval.ErrStore, q.key(id), err)
	}
	return s, nil
}

// all reads every request and the revision of the read.
func (q *Queue) all(ctx context.Context) ([]stored, int64, error) {
	resp, err := q.cli.Get(ctx, q.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, q.unreachable(err)
	}
	out := make([]stored, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		s, err := decode(kv.Value, kv.ModRevision)
		if err != nil || !approval.ValidID(s.r.ID) {
			continue // a foreign key under the prefix is not a request
		}
		out = append(out, s)
	}
	return out, resp.Header.Revision, nil
}

// retention is the etcd lease closed requests are bound to: one per hour
// of this queue, of Retain plus an hour, so none outlives Retain by more.
func (q *Queue) retention(ctx context.Context) (clientv3.LeaseID, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lease != 0 && time.Since(q.leaseAt) < time.Hour {
		return q.lease, nil
	}
	l, err := q.cli.Grant(ctx, int64((q.retain+time.Hour)/time.Second))
	if err != nil {
		return 0, q.unreachable(err)
	}
	q.lease, q.leaseAt = l.ID, time.Now()
	return l.ID, nil
}

// put writes s.r if the key still has the mod revision s was read at;
// false when it changed (read again). A closed request is bound to the
// retention lease; a pending one to none.
func (q *Queue) put(ctx context.Context, s stored) (bool, error) {
	b, err := json.Marshal(s.r)
	if err != nil {
		return false, fmt.Errorf("%w: %v", approval.ErrStore, err)
	}
	var opts []clientv3.OpOption
	if s.r.State != approval.Pending {
		l, err := q.retention(ctx)
		if err != nil {
			return false, err
		}
		opts = append(opts, clientv3.WithLease(l))
	}
	k := q.key(s.r.ID)
	resp, err := q.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", s.rev)).
		Then(clientv3.OpPut(k, string(b), opts...)).Commit()
	if err != nil {
		return false, q.unreachable(err)
	}
	return resp.Succeeded, nil
}

// current reads a request, expiring it (one guarded write) when its
// deadline passed.
func (q *Queue) current(ctx context.Context, id string) (stored, error) {
	for try := 0; try < maxTries; try++ {
		s, err := q.get(ctx, id)
		if err != nil || !approval.Expire(s.r, q.now()) {
			return s, err
		}
		ok, err := q.put(ctx, s)
		if err != nil || ok {
			return s, err
		}
	}
	return stored{}, contention(id)
}

func contention(what string) error {
	return fmt.Errorf("%w: %s changed under every attempt (too much contention)", approval.ErrStore, what)
}

// Submit implements approval.Queue: the request it files names this host.
func (q *Queue) Submit(r approval.Request, timeout time.Duration) (*approval.Request, error) {
	ctx, cancel := q.ctx()
	defer cancel()
	for try := 0; try < maxTries; try++ {
		open, rev, err := q.open(ctx, r.Fingerprint)
		if err != nil || open != nil {
			return open, err
		}
		if rev == 0 {
			continue // an expiry lost a race: read again
		}
		n := r
		if n.ID, err = approval.NewID(); err != nil {
			return nil, err
		}
		n.Host, n.Created, n.State = q.host, q.now(), approval.Pending
		n.Deadline = n.Created.Add(timeout)
		b, err := json.Marshal(&n)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", approval.ErrStore, err)
		}
		// Filed only if no request changed since the read, so two
		// gateways filing the same call at once file it once.
		resp, err := q.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(q.prefix), "<", rev+1).WithPrefix()).
			Then(clientv3.OpPut(q.key(n.ID), string(b))).Commit()
		if err != nil {
			return nil, q.unreachable(err)
		}
		if resp.Succeeded {
			return &n, nil
		}
	}
	return nil, contention(q.prefix)
}

// open is the open request of fingerprint fp, or nil and the revision of
// a read that found none (0 when an expiry it wrote lost a race).
func (q *Queue) open(ctx context.Context, fp string) (*approval.Request, int64, error) {
	all, rev, err := q.all(ctx)
	if err != nil {
		return nil, 0, err
	}
	for _, s := range all {
		if s.r.Fingerprint != fp || !s.r.Open() {
			continue
		}
		if !approval.Expire(s.r, q.now()) {
			return s.r, 0, nil
		}
		// Written or not, the expiry leaves the read stale: read again.
		_, err := q.put(ctx, s)
		return nil, 0, err
	}
	return nil, rev, nil
}

// Get implements approval.Queue.
func (q *Queue) Get(id string) (*approval.Request, error) {
	ctx, cancel := q.ctx()
	defer cancel()
	s, err := q.current(ctx, id)
	return s.r, err
}

// Decide implements approval.Queue: of two decisions at once (on any
// hosts) one commits, the other returns approval.ErrDecided.
func (q *Queue) Decide(id string, approve bool, by, note string) (*approval.Request, error) {
	ctx, cancel := q.ctx()
	defer cancel()
	for try := 0; try < maxTries; try++ {
		s, err := q.current(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := approval.Decision(s.r, approve, by, note, q.now()); err != nil {
			return s.r, err
		}
		ok, err := q.put(ctx, s)
		if err != nil || ok {
			return s.r, err
		}
	}
	return nil, contention(id)
}

// MarkUsed implements approval.Queue.
func (q *Queue) MarkUsed(id string) error {
	ctx, cancel := q.ctx()
	defer cancel()
	for try := 0; try < maxTries; try++ {
		s, err := q.get(ctx, id)
		if err != nil {
			return err
		}
		s.r.Used = true
		ok, err := q.put(ctx, s)
		if err != nil || ok {
			return err
		}
	}
	return contention(id)
}

// List implements approval.Queue.
func (q *Queue) List(pendingOnly bool) ([]*approval.Request, error) {
	ctx, cancel := q.ctx()
	defer cancel()
	all, _, err := q.all(ctx)
	if err != nil {
		return nil, err
	}
	var out []*approval.Request
	for _, s := range all {
		if s.r.State == approval.Pending && !q.now().Before(s.r.Deadline) {
			// Expire it behind its guard; whatever wins is what shows.
			if s, err = q.current(ctx, s.r.ID); errors.Is(err, approval.ErrNotFound) {
				continue
			} else if err != nil {
				return nil, err
			}
		}
		if !pendingOnly || s.r.State == approval.Pending {
			out = append(out, s.r)
		}
	}
	approval.Sort(out)
	return out, nil
}
