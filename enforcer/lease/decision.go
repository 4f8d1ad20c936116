package lease

import (
	"encoding/json"
	"time"
)

// granted is what a Decision granted. A Table keeps it compact: what the
// leases of the grant share once, their IDs in one string, and the
// request's claims; a Lease is made of them when it is read. Making every
// Lease value at each grant (hundreds of bytes each, most of them
// pointers) was a quarter of a grant's time, in the collector, for callers
// that mostly read a count or the IDs. A store that makes its leases as
// values (a fleet's) hands them over whole (SetLeases).
type granted struct {
	ids                    string  // lease i: ids[i*idLen:(i+1)*idLen]
	claims                 []Claim // the request's: lease i is claim i
	holder                 Holder
	age, acquired, expires time.Time
	ttl, grace             time.Duration
	list                   []Lease // the leases made whole (SetLeases)
}

// NumLeases returns how many leases d granted (one per claim of a Granted
// request, none otherwise).
func (d *Decision) NumLeases() int {
	if d.granted.list != nil {
		return len(d.granted.list)
	}
	return len(d.granted.claims)
}

// Lease returns granted lease i (0 <= i < NumLeases), made now.
func (d *Decision) Lease(i int) Lease {
	g := &d.granted
	if g.list != nil {
		return g.list[i]
	}
	c := &g.claims[i]
	return Lease{ID: g.ids[i*idLen : (i+1)*idLen], Holder: g.holder, Predicate: c.Predicate, Resource: c.Resource,
		Object: c.Resource.String(), Intent: c.Intent, Age: g.age, AcquiredAt: g.acquired, ExpiresAt: g.expires,
		TTL: g.ttl, Grace: g.grace}
}

// LeaseID returns the ID of granted lease i, without making the lease.
func (d *Decision) LeaseID(i int) string {
	if g := &d.granted; g.list == nil {
		return g.ids[i*idLen : (i+1)*idLen]
	}
	return d.granted.list[i].ID
}

// Leases returns the leases d granted, made now (a new slice each call):
// one per claim of the request, in its order; nil when none.
func (d *Decision) Leases() []Lease {
	n := d.NumLeases()
	if n == 0 {
		return nil
	}
	out := make([]Lease, n)
	for i := range out {
		out[i] = d.Lease(i)
	}
	return out
}

// SetLeases makes ls the leases d granted: a store that makes its leases
// as values (a fleet store) answers with them. d keeps ls.
func (d *Decision) SetLeases(ls []Lease) { d.granted = granted{list: ls} }

// decisionJSON is a Decision's JSON form, its leases made whole.
type decisionJSON struct {
	Outcome   Outcome       `json:"outcome"`
	Leases    []Lease       `json:"leases,omitempty"`    // Granted: one per claim
	Conflicts []Conflict    `json:"conflicts,omitempty"` // Wait, Die: every conflict found
	WaitTime  time.Duration `json:"wait_time,omitempty"`
	Age       time.Time     `json:"age"`
}

// MarshalJSON renders d with its leases.
func (d Decision) MarshalJSON() ([]byte, error) {
	return json.Marshal(decisionJSON{Outcome: d.Outcome, Leases: d.Leases(), Conflicts: d.Conflicts, WaitTime: d.WaitTime, Age: d.Age})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (d *Decision) UnmarshalJSON(b []byte) error {
	var x decisionJSON
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	*d = Decision{Outcome: x.Outcome, Conflicts: x.Conflicts, WaitTime: x.WaitTime, Age: x.Age}
	if x.Leases != nil {
		d.SetLeases(x.Leases)
	}
	return nil
}
