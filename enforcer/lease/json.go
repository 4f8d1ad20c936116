package lease

import (
	"encoding/json"
	"fmt"

	"github.com/klocklabs/klock/policy"
)

// The JSON forms read back what the marshalled forms wrote: the host
// store's journal, and API clients, decode leases and claims with their
// resources parsed from the object they name.

// UnmarshalText reads a state name.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range [...]string{"Active", "Expired", "Released", "Revoked"} {
		if string(b) == n {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("lease: unknown state %q", b)
}

// UnmarshalText reads an outcome name.
func (o *Outcome) UnmarshalText(b []byte) error {
	for i, n := range [...]string{"GRANTED", "WAIT", "DIE"} {
		if string(b) == n {
			*o = Outcome(i)
			return nil
		}
	}
	return fmt.Errorf("lease: unknown outcome %q", b)
}

func parsePredicateObject(p, object string) (policy.Predicate, Resource, error) {
	pr, err := policy.ParsePredicate(p)
	if err != nil {
		return 0, Resource{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	r, err := ParseResource(object)
	return pr, r, err
}

// UnmarshalJSON reads a lease and parses its object into Resource.
func (l *Lease) UnmarshalJSON(b []byte) error {
	type plain Lease // without this method
	var w struct {
		plain
		Predicate string `json:"predicate"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	pr, r, err := parsePredicateObject(w.Predicate, w.Object)
	if err != nil {
		return err
	}
	*l = Lease(w.plain)
	l.Predicate, l.Resource = pr, r
	return nil
}

type claimJSON struct {
	Predicate policy.Predicate `json:"predicate"`
	Object    string           `json:"object"`
	Intent    string           `json:"intent,omitempty"`
}

// MarshalJSON writes the claim with its object ("FILE:/repo/**").
func (c Claim) MarshalJSON() ([]byte, error) {
	return json.Marshal(claimJSON{Predicate: c.Predicate, Object: c.Resource.String(), Intent: c.Intent})
}

// UnmarshalJSON reads a claim and parses its object into Resource.
func (c *Claim) UnmarshalJSON(b []byte) error {
	var w struct {
		Predicate string `json:"predicate"`
		Object    string `json:"object"`
		Intent    string `json:"intent"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	pr, r, err := parsePredicateObject(w.Predicate, w.Object)
	if err != nil {
		return err
	}
	*c = Claim{Predicate: pr, Resource: r, Intent: w.Intent}
	return nil
}
