package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/klocklabs/klock/policy"
)

// Table is the in-memory lease manager.
type Table struct {
	mu     sync.Mutex
	now    func() time.Time
	leases map[string]*Lease // every lease held, by id
	ended  []Lease           // leases no longer held, oldest first
	subs   map[chan Event]struct{}
}

// TableOption configures a Table.
type TableOption func(*Table)

// WithClock makes the table read time from now (tests).
func WithClock(now func() time.Time) TableOption { return func(t *Table) { t.now = now } }

// NewTable returns an empty table.
func NewTable(opts ...TableOption) *Table {
	t := &Table{now: time.Now, leases: map[string]*Lease{}, subs: map[chan Event]struct{}{}}
	for _, o := range opts {
		o(t)
	}
	return t
}

var _ Store = (*Table)(nil)

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "l-" + hex.EncodeToString(b[:])
}

func clampTTL(ttl, def, max time.Duration) time.Duration {
	if ttl <= 0 {
		return def
	}
	if max > 0 && ttl > max {
		return max
	}
	return ttl
}

func checkRequest(req *Request) error {
	if req.Holder.Session == "" || req.Holder.Agent == "" {
		return fmt.Errorf("%w: a request needs a holder (agent and session)", ErrInvalid)
	}
	for i, c := range req.Claims {
		if c.Resource.Type != policy.ObjFile && c.Resource.Type != policy.ObjNet {
			return fmt.Errorf("%w: claim %d (%s) is on nothing a lease covers", ErrInvalid, i, c.Intent)
		}
	}
	return nil
}

// expireLocked moves the leases no longer held at now to ended.
func (t *Table) expireLocked(now time.Time) {
	for id, l := range t.leases {
		if !l.HeldAt(now) {
			l.State, l.EndedAt = Expired, now
			t.endLocked(id, l)
		}
	}
}

func (t *Table) endLocked(id string, l *Lease) {
	delete(t.leases, id)
	t.ended = append(t.ended, *l)
	if len(t.ended) > 100000 {
		t.ended = append([]Lease(nil), t.ended[len(t.ended)-50000:]...)
	}
	t.publishLocked(Event{Type: LeaseFreed, Lease: *l, Time: l.EndedAt})
}

// Acquire implements Store.
func (t *Table) Acquire(_ context.Context, req Request) (Decision, error) {
	if err := checkRequest(&req); err != nil {
		return Decision{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if req.Age.IsZero() {
		req.Age = now
	}
	t.expireLocked(now)
	d := Decision{Outcome: Granted, Age: req.Age}
	for _, c := range req.Claims {
		for _, l := range t.leases {
			if l.Holder == req.Holder || !policy.Conflicts(l.Predicate, c.Predicate) || !Overlap(l.Resource, c.Resource) {
				continue
			}
			o := Die
			if req.Age.Before(l.Age) {
				o = Wait
			}
			d.Conflicts = append(d.Conflicts, Conflict{Claim: c, Held: *l, Outcome: o})
			if o > d.Outcome {
				d.Outcome = o
			}
			if w := l.ExpiresAt.Add(l.Grace).Sub(now); d.WaitTime == 0 || w < d.WaitTime {
				d.WaitTime = w
			}
		}
	}
	if d.Outcome != Granted {
		t.publishLocked(Event{Type: ContentionDetected, Decision: &d, Holder: req.Holder, Time: now})
		return d, nil
	}
	ttl := clampTTL(req.TTL, DefaultTTL, MaxTTL)
	grace := clampTTL(req.Grace, DefaultGrace, MaxTTL)
	for _, c := range req.Claims {
		l := &Lease{ID: newID(), Holder: req.Holder, Predicate: c.Predicate, Resource: c.Resource, Object: c.Resource.String(),
			Intent: c.Intent, Age: req.Age, AcquiredAt: now, ExpiresAt: now.Add(ttl), TTL: ttl, Grace: grace}
		t.leases[l.ID] = l
		d.Leases = append(d.Leases, *l)
		t.publishLocked(Event{Type: LeaseGranted, Lease: *l, Time: now})
	}
	return d, nil
}

// Heartbeat implements Store.
func (t *Table) Heartbeat(_ context.Context, h Holder) (time.Time, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.expireLocked(now)
	var until time.Time
	for _, l := range t.leases {
		if l.Holder == h {
			l.ExpiresAt = now.Add(l.TTL)
			if until.IsZero() || l.ExpiresAt.Before(until) {
				until = l.ExpiresAt
			}
		}
	}
	if until.IsZero() {
		return time.Time{}, fmt.Errorf("%w: session %s holds none", ErrGone, h.Session)
	}
	return until, nil
}

// Release implements Store.
func (t *Table) Release(_ context.Context, h Holder, ids ...string) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endWhereLocked(Released, func(l *Lease) bool {
		if l.Holder != h {
			return false
		}
		if len(ids) == 0 {
			return true
		}
		for _, id := range ids {
			if l.ID == id {
				return true
			}
		}
		return false
	}), nil
}

// Revoke implements Store.
func (t *Table) Revoke(_ context.Context, idOrSession string) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endWhereLocked(Revoked, func(l *Lease) bool { return l.ID == idOrSession || l.Holder.Session == idOrSession }), nil
}

func (t *Table) endWhereLocked(s State, match func(*Lease) bool) int {
	now := t.now()
	n := 0
	for id, l := range t.leases {
		if match(l) {
			l.State, l.EndedAt = s, now
			t.endLocked(id, l)
			n++
		}
	}
	return n
}

// List implements Store.
func (t *Table) List(_ context.Context, f Filter) ([]Lease, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(t.now())
	var out []Lease
	keep := func(l *Lease) bool {
		return (f.Tenant == "" || l.Holder.Tenant == f.Tenant) && (f.Session == "" || l.Holder.Session == f.Session) &&
			(f.Overlapping == nil || Overlap(*f.Overlapping, l.Resource))
	}
	for _, l := range t.leases {
		if keep(l) {
			out = append(out, *l)
		}
	}
	if !f.EndedSince.IsZero() {
		for i := range t.ended {
			if l := &t.ended[i]; !l.EndedAt.Before(f.EndedSince) && keep(l) {
				out = append(out, *l)
			}
		}
	}
	return out, nil
}

// Close implements Store.
func (t *Table) Close() error { return nil }
