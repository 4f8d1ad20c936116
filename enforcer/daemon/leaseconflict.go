package daemon

import (
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
)

// WireLeaseConflict is a *session.LeaseConflictError on the wire: the
// lease manager's last answer to a session that was not granted its
// leases, each conflict with its holder.
type WireLeaseConflict struct {
	Outcome   string         `json:"outcome"` // WAIT or DIE
	WaitedMS  int64          `json:"waited_ms"`
	WaitMS    int64          `json:"wait_ms,omitempty"` // the --wait it had
	Conflicts []WireConflict `json:"conflicts"`
}

// WireConflict is one lease.Conflict: this session's intent, and the lease
// in its way.
type WireConflict struct {
	Intent     string    `json:"intent"`    // this session's own
	Predicate  string    `json:"predicate"` // of the intent
	HeldID     string    `json:"held_id"`
	Held       string    `json:"held"` // the held lease's predicate
	Object     string    `json:"object"`
	Tenant     string    `json:"tenant,omitempty"`
	Agent      string    `json:"agent"`
	Session    string    `json:"session"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Outcome    string    `json:"outcome"`
}

func toWireConflict(e *session.LeaseConflictError) *WireLeaseConflict {
	w := &WireLeaseConflict{Outcome: e.Decision.Outcome.String(), WaitedMS: e.Waited.Milliseconds(), WaitMS: e.Wait.Milliseconds()}
	for _, c := range e.Decision.Conflicts {
		h := c.Held
		w.Conflicts = append(w.Conflicts, WireConflict{Intent: c.Claim.Intent, Predicate: c.Claim.Predicate.String(), HeldID: h.ID,
			Held: h.Predicate.String(), Object: h.Object, Tenant: h.Holder.Tenant, Agent: h.Holder.Agent, Session: h.Holder.Session,
			AcquiredAt: h.AcquiredAt, ExpiresAt: h.ExpiresAt, Outcome: c.Outcome.String()})
	}
	return w
}

func outcomeOf(s string) lease.Outcome {
	switch s {
	case lease.Wait.String():
		return lease.Wait
	case lease.Granted.String():
		return lease.Granted
	}
	return lease.Die
}

// conflictError rebuilds the session's error from the wire.
func (w *WireLeaseConflict) conflictError() *session.LeaseConflictError {
	e := &session.LeaseConflictError{Decision: lease.Decision{Outcome: outcomeOf(w.Outcome)},
		Waited: time.Duration(w.WaitedMS) * time.Millisecond, Wait: time.Duration(w.WaitMS) * time.Millisecond}
	for _, c := range w.Conflicts {
		p, _ := policy.ParsePredicate(c.Predicate)
		hp, _ := policy.ParsePredicate(c.Held)
		held := lease.Lease{ID: c.HeldID, Holder: lease.Holder{Tenant: c.Tenant, Agent: c.Agent, Session: c.Session}, Predicate: hp,
			Object: c.Object, AcquiredAt: c.AcquiredAt, ExpiresAt: c.ExpiresAt, State: lease.Active}
		if r, err := lease.ParseResource(c.Object); err == nil {
			held.Resource = r
		}
		claim := lease.Claim{Predicate: p, Intent: c.Intent}
		if in, err := policy.ParseIntent(c.Intent); err == nil {
			if cl, ok, _ := lease.FromIntent(in); ok {
				claim = cl
			}
		}
		e.Decision.Conflicts = append(e.Decision.Conflicts, lease.Conflict{Claim: claim, Held: held, Outcome: outcomeOf(c.Outcome)})
	}
	return e
}

// As lets errors.As find the *session.LeaseConflictError a lease_conflict
// refusal carries.
func (e *Error) As(target any) bool {
	t, ok := target.(**session.LeaseConflictError)
	if !ok || e.Lease == nil {
		return false
	}
	*t = e.Lease.conflictError()
	return true
}
