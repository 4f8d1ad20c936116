package eventlog

import (
	"context"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
)

// Leases wraps a lease store so that each decision it makes is a record:
// lease.grant with the leases of a granted request, lease.wait or lease.die with the first
// conflict, lease.revoke with the count freed. Heartbeats, releases and
// lists are not decisions and pass through unrecorded. It composes with
// other decorators of lease.Store (it holds only the store it wraps).
func Leases(s lease.Store, sink Sink) lease.Store {
	if sink == nil {
		return s
	}
	l := &leases{Store: s, sink: sink}
	// What the store can do besides Store, the decorator does too: a
	// store that queues a WAIT goes on queueing (lease.AcquireWait asks
	// for Awaiter), and the lease API serves the store's own event
	// stream (leaseapi.Events).
	aw, isAW := s.(lease.Awaiter)
	sub, isSub := s.(subscriber)
	switch {
	case isAW && isSub:
		return &struct {
			*leases
			awaiter
			subscriber
		}{l, awaiter{l, aw}, sub}
	case isAW:
		return &struct {
			*leases
			awaiter
		}{l, awaiter{l, aw}}
	case isSub:
		return &struct {
			*leases
			subscriber
		}{l, sub}
	}
	return l
}

// subscriber is a store's event stream (lease.Host's, leaseapi.Events).
type subscriber interface {
	Subscribe(buf int) (<-chan lease.Event, func())
}

type leases struct {
	lease.Store
	sink Sink
}

// awaiter records the decisions of a store's Await.
type awaiter struct {
	l  *leases
	aw lease.Awaiter
}

func (a awaiter) Await(ctx context.Context, req lease.Request, max time.Duration) (lease.Decision, error) {
	d, err := a.aw.Await(ctx, req, max)
	if err == nil || d.NumLeases() > 0 { // a grant racing ctx's end is held
		a.l.decided(req, d)
	}
	return d, err
}

func (l *leases) Acquire(ctx context.Context, req lease.Request) (lease.Decision, error) {
	d, err := l.Store.Acquire(ctx, req)
	if err == nil {
		l.decided(req, d)
	}
	return d, err
}

// decided publishes the records of one decision.
func (l *leases) decided(req lease.Request, d lease.Decision) {
	h := req.Holder
	base := Record{Session: h.Session, Agent: h.Agent, Owner: h.Tenant}
	switch d.Outcome {
	case lease.Granted:
		// One record per request: a session's baseline alone is some
		// thirty leases, taken as one decision.
		g := &Lease{Count: d.NumLeases()}
		for i := range min(g.Count, maxList+1) { // clip says how many more there were
			x := d.Lease(i)
			g.Leases = append(g.Leases, x.ID+" "+x.Predicate.String()+" "+x.Object)
		}
		r := base
		r.Kind, r.Lease = KindLeaseGrant, g
		l.sink.Publish(r)
	case lease.Wait, lease.Die:
		r := base
		r.Kind, r.Lease = KindLeaseWait, &Lease{}
		if d.Outcome == lease.Die {
			r.Kind = KindLeaseDie
		}
		if len(d.Conflicts) > 0 {
			c := d.Conflicts[0]
			r.Lease = &Lease{ID: c.Held.ID, Predicate: c.Claim.Predicate.String(), Object: c.Held.Object, Holder: c.Held.Holder.Session}
		}
		l.sink.Publish(r)
	}
}

func (l *leases) Revoke(ctx context.Context, idOrSession string) (int, error) {
	n, err := l.Store.Revoke(ctx, idOrSession)
	if err == nil && n > 0 {
		l.sink.Publish(Record{Kind: KindLeaseRevoke, Lease: &Lease{ID: idOrSession, Count: n}})
	}
	return n, err
}
