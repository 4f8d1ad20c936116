package metrics

import (
	"context"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/prometheus/client_golang/prometheus"
)

// leaseMetrics are the lease store's, counted by the Leases decorator.
type leaseMetrics struct {
	decisions *prometheus.CounterVec
	grants    prometheus.Counter
	conflicts prometheus.Counter
	revoked   prometheus.Counter
	errors    *prometheus.CounterVec
}

func newLeaseMetrics(register func(...prometheus.Collector)) leaseMetrics {
	l := leaseMetrics{
		decisions: prometheus.NewCounterVec(counter("klock_lease_decisions_total",
			"Wait-Die decisions of the lease store on acquisitions by klockd's sessions and its lease API: granted, wait (an older requester waits), die (a younger one backs off)."),
			[]string{"outcome"}),
		grants: prometheus.NewCounter(counter("klock_lease_grants_total",
			"Leases granted (one per claim of a granted acquisition).")),
		conflicts: prometheus.NewCounter(counter("klock_lease_conflicts_total",
			"Contention: conflicts with held leases found by acquisitions that had to wait or die (one per claim and lease in conflict).")),
		revoked: prometheus.NewCounter(counter("klock_lease_revocations_total",
			"Leases revoked by an operator (FORCE_REVOKE: klock leases revoke, the lease API).")),
		errors: prometheus.NewCounterVec(counter("klock_lease_store_errors_total",
			"Lease store operations that failed, by operation (acquire, heartbeat, release, revoke, list)."), []string{"op"}),
	}
	register(l.decisions, l.grants, l.conflicts, l.revoked, l.errors)
	for _, o := range []string{"granted", "wait", "die"} {
		l.decisions.WithLabelValues(o)
	}
	return l
}

// Leases wraps s so that m counts its decisions, grants, conflicts and
// revocations; everything else passes through. The result keeps the
// optional interfaces s has: lease.Awaiter (lease.AcquireWait then still
// waits in the store) and Subscriber (the lease API's event stream). So
// it wraps any other decorator of lease.Store that keeps them, or is
// wrapped by one, in either order. A nil m returns s.
func Leases(s lease.Store, m *Metrics) lease.Store {
	if m == nil {
		return s
	}
	c := &countingStore{Store: s, m: &m.leases}
	aw, isAw := s.(lease.Awaiter)
	sub, isSub := s.(Subscriber)
	switch {
	case isAw && isSub:
		return &countingAwaitSubscriber{&countingAwaiter{countingStore: c, aw: aw}, sub}
	case isAw:
		return &countingAwaiter{countingStore: c, aw: aw}
	case isSub:
		return &countingSubscriber{c, sub}
	}
	return c
}

// Subscriber is a store with an event stream (lease.Table, lease.Host:
// leaseapi.Events).
type Subscriber interface {
	Subscribe(buf int) (<-chan lease.Event, func())
}

// countingSubscriber is a countingStore over a store with events.
type countingSubscriber struct {
	*countingStore
	Subscriber
}

// countingAwaitSubscriber is a countingAwaiter over a store with events.
type countingAwaitSubscriber struct {
	*countingAwaiter
	Subscriber
}

// countingStore counts what passes through a lease.Store.
type countingStore struct {
	lease.Store
	m *leaseMetrics
}

// Acquire counts the decision.
func (s *countingStore) Acquire(ctx context.Context, req lease.Request) (lease.Decision, error) {
	d, err := s.Store.Acquire(ctx, req)
	s.decided(d, err, "acquire")
	return d, err
}

// Heartbeat counts a failure (ErrGone included: the holder lost them).
func (s *countingStore) Heartbeat(ctx context.Context, h lease.Holder) (time.Time, error) {
	t, err := s.Store.Heartbeat(ctx, h)
	s.failed(err, "heartbeat")
	return t, err
}

// Release counts a failure.
func (s *countingStore) Release(ctx context.Context, h lease.Holder, ids ...string) (int, error) {
	n, err := s.Store.Release(ctx, h, ids...)
	s.failed(err, "release")
	return n, err
}

// Revoke counts the leases revoked.
func (s *countingStore) Revoke(ctx context.Context, idOrSession string) (int, error) {
	n, err := s.Store.Revoke(ctx, idOrSession)
	s.m.revoked.Add(float64(n))
	s.failed(err, "revoke")
	return n, err
}

// List counts a failure.
func (s *countingStore) List(ctx context.Context, f lease.Filter) ([]lease.Lease, error) {
	ls, err := s.Store.List(ctx, f)
	s.failed(err, "list")
	return ls, err
}

// decided counts one decision (none when err).
func (s *countingStore) decided(d lease.Decision, err error, op string) {
	if err != nil {
		s.failed(err, op)
		return
	}
	switch d.Outcome {
	case lease.Granted:
		s.m.decisions.WithLabelValues("granted").Inc()
		s.m.grants.Add(float64(d.NumLeases()))
	case lease.Wait:
		s.m.decisions.WithLabelValues("wait").Inc()
		s.m.conflicts.Add(float64(len(d.Conflicts)))
	case lease.Die:
		s.m.decisions.WithLabelValues("die").Inc()
		s.m.conflicts.Add(float64(len(d.Conflicts)))
	}
}

func (s *countingStore) failed(err error, op string) {
	if err != nil {
		s.m.errors.WithLabelValues(op).Inc()
	}
}

// countingAwaiter is a countingStore over a lease.Awaiter.
type countingAwaiter struct {
	*countingStore
	aw lease.Awaiter
}

// Await decides req once without waiting, so that a WAIT is counted even
// when the wait ends in a grant (the store's Await returns only the
// last decision), then waits in the store as asked, with the age the
// first decision gave.
func (s *countingAwaiter) Await(ctx context.Context, req lease.Request, max time.Duration) (lease.Decision, error) {
	d, err := s.Acquire(ctx, req)
	if err != nil || d.Outcome != lease.Wait || max <= 0 {
		return d, err
	}
	req.Age = d.Age
	d, err = s.aw.Await(ctx, req, max)
	s.decided(d, err, "acquire")
	return d, err
}
