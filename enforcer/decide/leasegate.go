package decide

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
)

// LeaseGateOptions configure LeaseGate.
type LeaseGateOptions struct {
	// Store is the lease manager the session's leases are in; Holder the
	// session (its amendments are its leases: same holder, so they never
	// conflict with its own, are renewed by its Heartbeat and freed by its
	// Release); Age its Wait-Die age (zero: now); TTL the leases' (zero:
	// lease.DefaultTTL).
	Store  lease.Store
	Holder lease.Holder
	Age    time.Time
	TTL    time.Duration
	// Before, when set, runs once the lease is held and before the
	// amendment is made: it backs up what the amendment lets the agent
	// change (KLIS-6 §3.3). Its error refuses the amendment, and the
	// lease just taken is released.
	Before func(AmendRequest) error
	// Context bounds each call to Store (default: none).
	Context context.Context
}

// LeaseGate is the AmendGate of a session that holds leases: it acquires
// the amendment's exact intent as a lease of o.Holder, and grants the
// amendment when the lease is granted. A WAIT or a DIE is not granted (an
// amendment never waits: the agent's operation is in flight), and neither
// is a store that cannot answer (fail closed). An intent nothing leases
// (PROC, files under /dev, /proc, /sys: lease.FromIntent) is granted
// without a lease.
func LeaseGate(o LeaseGateOptions) AmendGate {
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	return func(r AmendRequest) AmendAnswer {
		c, leased, _ := lease.FromIntent(r.Intent)
		var ids []string
		if leased {
			d, err := o.Store.Acquire(ctx, lease.Request{Holder: o.Holder, Claims: []lease.Claim{c}, Age: o.Age, TTL: o.TTL})
			if err != nil {
				return AmendAnswer{Why: fmt.Sprintf("the lease store could not decide %s: %v", r.Intent, err)}
			}
			if d.Outcome != lease.Granted {
				return denied(r, d)
			}
			for i := range d.NumLeases() {
				ids = append(ids, d.LeaseID(i))
			}
		}
		if o.Before != nil {
			if err := o.Before(r); err != nil {
				if len(ids) > 0 {
					_, _ = o.Store.Release(context.WithoutCancel(ctx), o.Holder, ids...)
				}
				return AmendAnswer{Why: fmt.Sprintf("%s was not granted: %v", r.Intent, err)}
			}
		}
		return AmendAnswer{Granted: true}
	}
}

// denied is the answer for a lease decision that was not granted: every
// conflicting lease, the first named in Why.
func denied(r AmendRequest, d lease.Decision) AmendAnswer {
	a := AmendAnswer{}
	for _, c := range d.Conflicts {
		a.Conflicts = append(a.Conflicts, LeaseConflict{
			ID: c.Held.ID, Agent: c.Held.Holder.Agent, Session: c.Held.Holder.Session,
			Lease: c.Held.Predicate.String() + " " + c.Held.Object,
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s conflicts with another session's lease", r.Intent)
	if len(a.Conflicts) > 0 {
		c := a.Conflicts[0]
		fmt.Fprintf(&b, ": %s (lease %s) held by session %s of agent %s", c.Lease, c.ID, c.Session, c.Agent)
		if n := len(a.Conflicts) - 1; n > 0 {
			fmt.Fprintf(&b, ", and %d more", n)
		}
	}
	b.WriteString("; the scope was not amended")
	a.Why = b.String()
	return a
}
