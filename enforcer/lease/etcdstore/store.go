package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/policy"
)

// ErrNoEtcd: etcd could not be reached or refused an operation; nothing
// was granted. It is a lease.ErrUnreachable.
var ErrNoEtcd error = noEtcd{}

type noEtcd struct{}

func (noEtcd) Error() string { return "etcdstore: etcd unavailable" }
func (noEtcd) Unwrap() error { return lease.ErrUnreachable }

// maxTries bounds the read-decide-commit loop under contention.
const maxTries = 64

// OpTimeout bounds one operation of the store on etcd when its caller
// set no deadline: an unreachable cluster (every member down, or this
// host cut off) refuses with ErrNoEtcd after it instead of hanging the
// session that asked. It is longer than an election (etcd's default
// election timeout is 1 s), so a leader change alone does not refuse.
const OpTimeout = 5 * time.Second

// bound gives ctx the store's deadline unless it has one.
func bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, OpTimeout)
}

// Store is a lease.Store on etcd. Safe for concurrent use.
type Store struct {
	cli    *clientv3.Client
	prefix string
	host   string
	lost   chan lease.Holder

	mu   sync.Mutex
	sess map[lease.Holder]*held
	// pool holds etcd leases whose holders released everything, kept
	// alive for the next holder of the same TTL: a grant then costs no
	// etcd lease grant, a release one delete (see holder.go).
	pool []*held
	// freeing says how the keys this store is deleting end (Released,
	// Revoked), for its event stream; bounded by freeingMax.
	freeing map[string]lease.State
	age     ageLease // what new age keys are bound to (age.go)
	// downSince is when etcd stopped answering (zero while it answers).
	downSince time.Time
	// gone are the holders whose keep-alive failed: their heartbeat
	// returns lease.ErrLost until they acquire again.
	gone map[lease.Holder]string // why
}

// held is an etcd lease and its keep-alive: one holder's (owner), or
// idle in the pool for the next holder of the same TTL. Its fields other
// than id, ttl and cancel are guarded by Store.mu.
type held struct {
	id     clientv3.LeaseID
	ttl    time.Duration
	cancel context.CancelFunc
	owner  *lease.Holder
	keys   map[string]bool // the lease keys this store put for owner
	dead   bool            // its keep-alive ended
}

// record is what a lease key holds.
type record struct {
	Lease lease.Lease `json:"lease"`
	// AgeRev is the holder's age; 0 in a record written with the
	// holder's first grant, whose age is that grant's revision (the
	// key's create revision).
	AgeRev   int64  `json:"age_rev"`
	Resource string `json:"resource"`
	key      string // the etcd key, as read
}

// New is a store on cli under prefix (default "/klock"), granting as host.
func New(cli *clientv3.Client, prefix, host string) *Store {
	if prefix == "" {
		prefix = "/klock"
	}
	return &Store{cli: cli, prefix: prefix, host: host, lost: make(chan lease.Holder, 64), sess: map[lease.Holder]*held{}, gone: map[lease.Holder]string{}, freeing: map[string]lease.State{}}
}

// Lost reports holders whose leases this store can no longer keep (the
// keep-alive stopped: etcd unreachable past the TTL, or revoked).
func (s *Store) Lost() <-chan lease.Holder { return s.lost }

func (s *Store) leasePrefix() string { return s.prefix + "/lease/" }

// unavailable is ErrNoEtcd for err, naming the cluster and what to check.
func (s *Store) unavailable(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		err = errors.New("no answer in time")
	}
	since := s.down()
	return fmt.Errorf("%w (%s, prefix %s) since %s: %v; nothing is granted without the fleet's etcd: check the cluster (etcdctl --endpoints %s endpoint health) and this host's way to it",
		ErrNoEtcd, strings.Join(s.cli.Endpoints(), ","), s.prefix, since.UTC().Format(time.RFC3339), err, strings.Join(s.cli.Endpoints(), ","))
}

// down records that etcd did not answer, and returns since when it has
// not (the first failure after the last answer).
func (s *Store) down() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.downSince.IsZero() {
		s.downSince = time.Now()
	}
	return s.downSince
}

// up records that etcd answered.
func (s *Store) up() {
	s.mu.Lock()
	s.downSince = time.Time{}
	s.mu.Unlock()
}

// Unreachable says since when etcd has not answered this store (zero:
// its last request was answered).
func (s *Store) Unreachable() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downSince
}

// ageKey is where h's age is kept.
func (s *Store) ageKey(h lease.Holder) string {
	return s.prefix + "/age/" + h.Tenant + "/" + h.Session + "/" + h.Agent
}

// ageRev is the session's cluster-wide age: the create revision of its age
// key, made on its first request (put if absent).
func (s *Store) ageRev(ctx context.Context, h lease.Holder) (int64, error) {
	k := s.ageKey(h)
	put, err := s.agePut(ctx, k)
	if err != nil {
		return 0, err
	}
	r, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(put).Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return 0, s.unavailable(err)
	}
	if r.Succeeded {
		return r.Header.Revision, nil
	}
	return r.Responses[0].GetResponseRange().Kvs[0].CreateRevision, nil
}

// Acquire implements lease.Store.
func (s *Store) Acquire(ctx context.Context, req lease.Request) (lease.Decision, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	d, _, err := s.acquire(ctx, req)
	return d, err
}

// view is what one decision read: the leases that may conflict with the
// request, the requester's age (0: it has none yet) and the revision.
type view struct {
	recs   []record
	age    int64
	rev    int64
	ranges []string
}

// acquire decides req, returning the revision its decision read.
func (s *Store) acquire(ctx context.Context, req lease.Request) (lease.Decision, int64, error) {
	if req.Holder.Session == "" || len(req.Claims) == 0 {
		return lease.Decision{}, 0, fmt.Errorf("%w: no holder or no claim", lease.ErrInvalid)
	}
	if req.Age.IsZero() {
		req.Age = time.Now()
	}
	ranges := s.conflictRanges(req.Claims)
	for try := 0; try < maxTries; try++ {
		v, err := s.readFor(ctx, req.Holder, ranges)
		if err != nil {
			return lease.Decision{}, 0, err
		}
		// A first request has no age yet: it is younger than every
		// holder read at v.rev (their age keys were made before their
		// grants), which is what v.rev+1 says; its age key is made with
		// its grant, or now if it must wait or die, so that it keeps its
		// age across retries (Wait-Die's guarantee).
		age := v.age
		if age == 0 {
			age = v.rev + 1
		}
		d := decide(&req, age, v.recs, time.Now())
		if d.Outcome != lease.Granted {
			if v.age == 0 {
				if _, err := s.ageRev(ctx, req.Holder); err != nil {
					return lease.Decision{}, 0, err
				}
			}
			return d, v.rev, nil
		}
		ok, err := s.commit(ctx, &req, v, &d)
		if err != nil || ok {
			return d, v.rev, err
		}
	}
	return lease.Decision{}, 0, fmt.Errorf("%w: too much contention", ErrNoEtcd)
}

// readFor reads, in one transaction, the leases under ranges and the
// holder's age key.
func (s *Store) readFor(ctx context.Context, h lease.Holder, ranges []string) (view, error) {
	ops := make([]clientv3.Op, 0, len(ranges)+1)
	for _, p := range ranges {
		ops = append(ops, clientv3.OpGet(p, clientv3.WithPrefix()))
	}
	ops = append(ops, clientv3.OpGet(s.ageKey(h)))
	r, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return view{}, s.unavailable(err)
	}
	s.up()
	v := view{rev: r.Header.Revision, ranges: ranges}
	for i, resp := range r.Responses {
		kvs := resp.GetResponseRange().Kvs
		if i == len(ranges) {
			if len(kvs) == 1 {
				v.age = kvs[0].CreateRevision
			}
			continue
		}
		v.recs = appendRecords(v.recs, kvs)
	}
	return v, nil
}

func (s *Store) read(ctx context.Context) ([]record, int64, error) {
	r, err := s.cli.Get(ctx, s.leasePrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, s.unavailable(err)
	}
	s.up()
	return appendRecords(make([]record, 0, len(r.Kvs)), r.Kvs), r.Header.Revision, nil
}

// appendRecords parses lease keys' values (skipping what does not parse:
// it was not written by a klock of this format).
func appendRecords(recs []record, kvs []*mvccpb.KeyValue) []record {
	for _, kv := range kvs {
		if rc, ok := parseRecord(kv); ok {
			recs = append(recs, rc)
		}
	}
	return recs
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

// commit writes the grant behind the revision fence of v (and makes the
// requester's age key if it has none); false when a lease key that could
// conflict changed since v.rev, or the age key appeared (decide again).
func (s *Store) commit(ctx context.Context, req *lease.Request, v view, d *lease.Decision) (bool, error) {
	h, err := s.holderLease(ctx, req)
	if err != nil {
		return false, err
	}
	now := time.Now()
	grace := req.Grace
	if grace <= 0 {
		grace = lease.DefaultGrace
	}
	age := v.age
	ops := make([]clientv3.Op, 0, len(req.Claims)+1)
	cmps := rangeFence(v.ranges, v.rev)
	if age == 0 {
		k := s.ageKey(req.Holder)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		put, err := s.agePut(ctx, k)
		if err != nil {
			return false, err
		}
		ops = append(ops, put)
	}
	leases := make([]lease.Lease, 0, len(req.Claims))
	keys := make([]string, 0, len(req.Claims))
	for _, c := range req.Claims {
		l := lease.Lease{ID: newID(), Holder: req.Holder, Predicate: c.Predicate, Resource: c.Resource,
			Object: c.Resource.String(), Intent: c.Intent, Age: req.Age, AcquiredAt: now,
			ExpiresAt: now.Add(h.ttl), TTL: h.ttl, Grace: grace, State: lease.Active, Host: s.host}
		// The record's age is filled in below once known; a first
		// request's is the revision of this very transaction, which
		// the readers of the record see as its key's create revision.
		b, err := json.Marshal(record{Lease: l, AgeRev: age, Resource: l.Object})
		if err != nil {
			return false, err
		}
		k := s.keyOf(c.Resource, l.ID)
		keys = append(keys, k)
		ops = append(ops, clientv3.OpPut(k, string(b), clientv3.WithLease(h.id)))
		leases = append(leases, l)
	}
	d.SetLeases(leases) // its fences are set below, once committed
	r, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// The holder's etcd lease ran out before its keep-alive said
		// so (a pooled one, or one a leader change let lapse): nothing
		// was put; drop it and decide again with a new one.
		if !s.drop(req.Holder, h) {
			return false, fmt.Errorf("%w: %s's etcd lease ran out with its leases", lease.ErrLost, req.Holder.Session)
		}
		return false, nil
	}
	if err != nil {
		// The outcome is unknown (etcd may have applied the grant and
		// lost the answer, as when its leader dies): the keys are
		// tracked as if put, so the holder's release deletes them too
		// instead of leaving them alive on a pooled etcd lease.
		s.track(req.Holder, h, keys)
		return false, s.unavailable(err)
	}
	if !r.Succeeded {
		return false, nil
	}
	for i := range leases {
		leases[i].Fence = r.Header.Revision
	}
	if !s.track(req.Holder, h, keys) { // released while granted: decide again
		_, _ = s.delete(ctx, keys, lease.Released)
		return false, nil
	}
	return true, nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
