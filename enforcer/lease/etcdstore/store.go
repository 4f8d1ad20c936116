package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/policy"
)

// ErrNoEtcd: etcd could not be reached or refused an operation; nothing
// was granted.
var ErrNoEtcd = errors.New("etcdstore: etcd unavailable")

// maxTries bounds the read-decide-commit loop under contention.
const maxTries = 64

// Store is a lease.Store on etcd. Safe for concurrent use.
type Store struct {
	cli    *clientv3.Client
	prefix string
	host   string
	lost   chan lease.Holder

	mu   sync.Mutex
	sess map[lease.Holder]*held
	// gone are the holders whose keep-alive failed: their heartbeat
	// returns lease.ErrLost until they acquire again.
	gone map[lease.Holder]bool
}

// held is one holder's etcd lease and its keep-alive.
type held struct {
	id     clientv3.LeaseID
	ttl    time.Duration
	cancel context.CancelFunc
}

// record is what a lease key holds.
type record struct {
	Lease    lease.Lease `json:"lease"`
	AgeRev   int64       `json:"age_rev"`
	Resource string      `json:"resource"`
}

// New is a store on cli under prefix (default "/klock"), granting as host.
func New(cli *clientv3.Client, prefix, host string) *Store {
	if prefix == "" {
		prefix = "/klock"
	}
	return &Store{cli: cli, prefix: prefix, host: host, lost: make(chan lease.Holder, 64), sess: map[lease.Holder]*held{}, gone: map[lease.Holder]bool{}}
}

// Lost reports holders whose leases this store can no longer keep (the
// keep-alive stopped: etcd unreachable past the TTL, or revoked).
func (s *Store) Lost() <-chan lease.Holder { return s.lost }

func (s *Store) leasePrefix() string { return s.prefix + "/lease/" }

func unavailable(err error) error { return fmt.Errorf("%w: %v", ErrNoEtcd, err) }

// ageRev is the session's cluster-wide age: the create revision of its age
// key, made on its first request.
func (s *Store) ageRev(ctx context.Context, h lease.Holder) (int64, error) {
	k := s.prefix + "/age/" + h.Tenant + "/" + h.Session + "/" + h.Agent
	r, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, s.host)).Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return 0, unavailable(err)
	}
	if r.Succeeded {
		return r.Header.Revision, nil
	}
	return r.Responses[0].GetResponseRange().Kvs[0].CreateRevision, nil
}

// Acquire implements lease.Store.
func (s *Store) Acquire(ctx context.Context, req lease.Request) (lease.Decision, error) {
	d, _, err := s.acquire(ctx, req)
	return d, err
}

// acquire decides req, returning the revision its decision read.
func (s *Store) acquire(ctx context.Context, req lease.Request) (lease.Decision, int64, error) {
	if req.Holder.Session == "" || len(req.Claims) == 0 {
		return lease.Decision{}, 0, fmt.Errorf("%w: no holder or no claim", lease.ErrInvalid)
	}
	if req.Age.IsZero() {
		req.Age = time.Now()
	}
	age, err := s.ageRev(ctx, req.Holder)
	if err != nil {
		return lease.Decision{}, 0, err
	}
	for try := 0; try < maxTries; try++ {
		recs, rev, err := s.read(ctx)
		if err != nil {
			return lease.Decision{}, 0, err
		}
		d := decide(&req, age, recs, time.Now())
		if d.Outcome != lease.Granted {
			return d, rev, nil
		}
		ok, err := s.commit(ctx, &req, age, rev, &d)
		if err != nil || ok {
			return d, rev, err
		}
	}
	return lease.Decision{}, 0, fmt.Errorf("%w: too much contention", ErrNoEtcd)
}

func (s *Store) read(ctx context.Context) ([]record, int64, error) {
	r, err := s.cli.Get(ctx, s.leasePrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, unavailable(err)
	}
	recs := make([]record, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var rc record
		if json.Unmarshal(kv.Value, &rc) != nil {
			continue
		}
		res, err := lease.ParseResource(rc.Resource)
		if err != nil {
			continue
		}
		rc.Lease.Resource = res
		rc.Lease.Fence = kv.CreateRevision
		recs = append(recs, rc)
	}
	return recs, r.Header.Revision, nil
}

// decide is Wait-Die of req (of age revision age) against recs, as
// lease.Table decides it: an older requester waits, a younger one dies.
func decide(req *lease.Request, age int64, recs []record, now time.Time) lease.Decision {
	d := lease.Decision{Outcome: lease.Granted, Age: req.Age}
	for _, c := range req.Claims {
		for _, rc := range recs {
			l := rc.Lease
			if l.Holder.SameParty(req.Holder) || !lease.Overlap(c.Resource, l.Resource) ||
				!policy.Conflicts(l.Predicate, c.Predicate) {
				continue
			}
			o := lease.Die
			if age < rc.AgeRev {
				o = lease.Wait
			}
			d.Conflicts = append(d.Conflicts, lease.Conflict{Claim: c, Held: l, Outcome: o})
			d.Outcome = max(d.Outcome, o)
			if w := l.ExpiresAt.Sub(now); d.WaitTime == 0 || w < d.WaitTime {
				d.WaitTime = w
			}
		}
	}
	return d
}

// commit writes the grant behind the revision fence rev; false when a
// lease key changed since rev (decide again).
func (s *Store) commit(ctx context.Context, req *lease.Request, age, rev int64, d *lease.Decision) (bool, error) {
	h, err := s.holderLease(ctx, req)
	if err != nil {
		return false, err
	}
	now := time.Now()
	grace := req.Grace
	if grace <= 0 {
		grace = lease.DefaultGrace
	}
	ops := make([]clientv3.Op, 0, len(req.Claims))
	d.Leases = d.Leases[:0]
	for _, c := range req.Claims {
		l := lease.Lease{ID: newID(), Holder: req.Holder, Predicate: c.Predicate, Resource: c.Resource,
			Object: c.Resource.String(), Intent: c.Intent, Age: req.Age, AcquiredAt: now,
			ExpiresAt: now.Add(h.ttl), TTL: h.ttl, Grace: grace, State: lease.Active, Host: s.host}
		b, err := json.Marshal(record{Lease: l, AgeRev: age, Resource: l.Object})
		if err != nil {
			return false, err
		}
		ops = append(ops, clientv3.OpPut(s.leasePrefix()+l.ID, string(b), clientv3.WithLease(h.id)))
		d.Leases = append(d.Leases, l)
	}
	r, err := s.cli.Txn(ctx).If(fence(s.leasePrefix(), rev)).Then(ops...).Commit()
	if err != nil {
		return false, unavailable(err)
	}
	for i := range d.Leases {
		d.Leases[i].Fence = r.Header.Revision
	}
	return r.Succeeded, nil
}

// fence holds while no key of the range changed after rev.
func fence(prefix string, rev int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(prefix), "<", rev+1).WithPrefix()
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
