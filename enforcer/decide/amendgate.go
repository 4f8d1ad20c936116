package decide

import (
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// AmendRequest is a permissive amendment the engine is about to make: the
// exact lease intent for a violating triple (KLIS-6 §3, Dynamic Lease
// Acquisition).
type AmendRequest struct {
	// Intent is the lease intent (Origin "lease") the scope would grow by.
	Intent policy.Intent
	// Triple is the violating triple it allows.
	Triple policy.Triple
	// Blocked: a wall refused the operation, so it has not taken effect.
	// Granted, the amendment lets a retry through where the wall widens
	// while the agent runs (bpf-lsm): what a changing retry would change
	// must be backed up before the gate grants it (KLIS-6 §3.3).
	Blocked bool
	// Source is the backend that reported the operation.
	Source event.Source
}

// LeaseConflict is one lease of another holder an amendment conflicts
// with: who holds it and on what.
type LeaseConflict struct {
	ID      string // the lease's id
	Agent   string // its holder's agent id
	Session string // its holder's session id
	// Lease is the held lease's predicate and object
	// ("MUTATES FILE:/srv/repo/src/**").
	Lease string
}

// AmendAnswer is a gate's answer.
type AmendAnswer struct {
	Granted bool
	// Why says why it was not granted, naming the conflicting lease's
	// holder (session, agent) and object; it becomes the violation's
	// LeaseError.
	Why string
	// Conflicts are the leases of other holders that refused it (none
	// when something else did, e.g. the backup of its path failed).
	Conflicts []LeaseConflict
}

// AmendGate decides whether a permissive amendment may be made: the
// session acquires a lease for it in its lease store (an amendment never
// waits: a lease it would have to wait for is not granted), and backs up
// what a granted changing amendment lets the agent change. It is called
// with the engine's lock held and must not call back into the engine.
type AmendGate func(AmendRequest) AmendAnswer

// WithAmendGate makes every permissive amendment ask gate first (KLIS-6
// §3: an amendment is made only if no conflict exists). An amendment it
// does not grant is not made: the violation is recorded with
// ActionLeaseDenied, its LeaseError and the conflicting leases, and a
// refused operation stays refused. Without a gate every amendment is made
// (a session that coordinates with no one).
func WithAmendGate(gate AmendGate) Option { return func(e *Engine) { e.gate = gate } }

// askGate asks the gate, when there is one, for the lease intent of t.
func (e *Engine) askGate(ev event.Event, t policy.Triple, lease policy.Intent) AmendAnswer {
	if e.gate == nil {
		return AmendAnswer{Granted: true}
	}
	return e.gate(AmendRequest{Intent: lease, Triple: t, Blocked: ev.Blocked, Source: ev.Source})
}
