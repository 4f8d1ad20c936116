package lease

import (
	"encoding/json"
	"time"
)

// A journal line is decoded into lineRecord, which mirrors record with
// plain strings where record's types have JSON methods of their own
// (a claim's and a lease's predicate and object): encoding/json then
// validates and decodes each line once, instead of once more for every
// claim and lease (a method gets its bytes validated and decoded again).
// The objects are parsed after, in toRecord. The JSON is the same.

type lineRecord struct {
	Op     string       `json:"op"`
	At     time.Time    `json:"at"`
	Grants []*lineGrant `json:"grants,omitempty"`
	Leases []lineLease  `json:"leases,omitempty"`
	Holder *Holder      `json:"holder,omitempty"`
	IDs    []string     `json:"ids,omitempty"`
	State  State        `json:"state,omitempty"`
	Queued *lineWaiter  `json:"queued,omitempty"`
	Waiter string       `json:"waiter,omitempty"`
	Why    string       `json:"why,omitempty"`
	Gen    uint64       `json:"gen,omitempty"`
	Format int          `json:"format,omitempty"`
	Size   int64        `json:"size,omitempty"`
	Lines  int          `json:"lines,omitempty"`
}

type lineClaim struct {
	Predicate string `json:"predicate"`
	Object    string `json:"object"`
	Intent    string `json:"intent"`
}

type lineGrant struct {
	wireGrant
	Claims []lineClaim `json:"claims"`
}

type lineWaiter struct {
	waiter
	Claims []lineClaim `json:"claims"`
}

// plainLease is Lease without its UnmarshalJSON (which an embedded Lease
// would lend lineLease, decoding it all through that method again).
type plainLease Lease

type lineLease struct {
	plainLease
	Predicate string `json:"predicate"`
}

func (c *lineClaim) claim() (Claim, error) {
	pr, r, err := parsePredicateObject(c.Predicate, c.Object)
	return Claim{Predicate: pr, Resource: r, Intent: c.Intent}, err
}

func claimsOf(in []lineClaim) ([]Claim, error) {
	if in == nil {
		return nil, nil
	}
	out := make([]Claim, len(in))
	for i := range in {
		var err error
		if out[i], err = in[i].claim(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeLine decodes one journal line into r.
func decodeLine(line []byte, r *record) error {
	var l lineRecord
	if err := json.Unmarshal(line, &l); err != nil {
		return err
	}
	*r = record{Op: l.Op, At: l.At, Holder: l.Holder, IDs: l.IDs, State: l.State, Waiter: l.Waiter, Why: l.Why,
		Gen: l.Gen, Format: l.Format, Size: l.Size, Lines: l.Lines}
	if l.Grants != nil {
		r.Grants = make([]*wireGrant, len(l.Grants))
		for i, g := range l.Grants {
			if g == nil {
				continue
			}
			w := g.wireGrant
			var err error
			if w.Claims, err = claimsOf(g.Claims); err != nil {
				return err
			}
			r.Grants[i] = &w
		}
	}
	if l.Queued != nil {
		w := l.Queued.waiter
		var err error
		if w.Claims, err = claimsOf(l.Queued.Claims); err != nil {
			return err
		}
		r.Queued = &w
	}
	if l.Leases != nil {
		r.Leases = make([]Lease, len(l.Leases))
		for i := range l.Leases {
			x := Lease(l.Leases[i].plainLease)
			pr, res, err := parsePredicateObject(l.Leases[i].Predicate, x.Object)
			if err != nil {
				return err
			}
			x.Predicate, x.Resource = pr, res
			r.Leases[i] = x
		}
	}
	return nil
}
