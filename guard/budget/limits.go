package budget

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/money"
)

// Key identifies one grant's budget: the capability (or session) it belongs
// to and its index among that capability's grants.
type Key struct {
	Capability string
	Grant      uint32
}

func (k Key) String() string { return fmt.Sprintf("%s#%d", k.Capability, k.Grant) }

// ParseKey reads a key as String writes it: capability#index.
func ParseKey(s string) (Key, error) {
	i := strings.LastIndexByte(s, '#')
	if i <= 0 {
		return Key{}, fmt.Errorf("%w: grant %q: want capability#index (e.g. orchestrator#0)", ErrBadRequest, s)
	}
	n, err := strconv.ParseUint(s[i+1:], 10, 32)
	if err != nil {
		return Key{}, fmt.Errorf("%w: grant %q: the index after # must be a grant number (e.g. orchestrator#0)", ErrBadRequest, s)
	}
	return Key{Capability: s[:i], Grant: uint32(n)}, nil
}

// Limits are a grant's three independent budget limits. A nil cost limit or
// a zero MaxInvocations means that limit is not set.
type Limits struct {
	Currency       string
	PerInvocation  *uint64
	Total          *uint64
	MaxInvocations uint64
}

// FromGrant reads a manifest grant's limits. Both cost limits must be in
// one currency; a grant with neither is counted in fallback.
func FromGrant(g policy.Grant, fallback string) (Limits, error) {
	l := Limits{Currency: fallback, MaxInvocations: g.MaxInvocations}
	if p := g.MaxCostPerInvocation; p != nil {
		u := p.Units
		l.Currency, l.PerInvocation = p.Currency, &u
	}
	if t := g.MaxTotalCost; t != nil {
		if l.PerInvocation != nil && t.Currency != l.Currency {
			return Limits{}, fmt.Errorf("%w: grant %s: %s is in %s, %s in %s", ErrBadRequest, g.Tool,
				LimitTotal, t.Currency, LimitPerInvocation, l.Currency)
		}
		u := t.Units
		l.Currency, l.Total = t.Currency, &u
	}
	if _, err := money.Exponent(l.Currency); err != nil {
		return Limits{}, fmt.Errorf("%w: grant %s: %v", ErrBadRequest, g.Tool, err)
	}
	return l, nil
}

func (l Limits) equal(o Limits) bool {
	eq := func(a, b *uint64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	return l.Currency == o.Currency && l.MaxInvocations == o.MaxInvocations && eq(l.PerInvocation, o.PerInvocation) && eq(l.Total, o.Total)
}

// Attenuation tightens one limit of a delegated grant (seed 003:
// ReduceCostPerInvocation, ReduceTotalCost, ReduceMaxInvocations).
type Attenuation struct {
	limit string
	value uint64
}

// ReduceCostPerInvocation sets the child's max_cost_per_invocation.
func ReduceCostPerInvocation(units uint64) Attenuation {
	return Attenuation{LimitPerInvocation, units}
}

// ReduceTotalCost sets the child's max_total_cost.
func ReduceTotalCost(units uint64) Attenuation { return Attenuation{LimitTotal, units} }

// ReduceMaxInvocations sets the child's max_invocations.
func ReduceMaxInvocations(n uint64) Attenuation { return Attenuation{LimitInvocations, n} }

// Attenuate returns the child limits: the parent's with each attenuation
// applied. An attenuation that would widen a limit (a value above the
// parent's, or setting a limit the parent leaves unset is fine, but never
// removing one) is rejected with ErrWiden: amplification is impossible at
// issuance, not caught at invocation.
func (l Limits) Attenuate(atts ...Attenuation) (Limits, error) {
	c := l
	for _, a := range atts {
		var cur *uint64
		switch a.limit {
		case LimitPerInvocation:
			cur = l.PerInvocation
		case LimitTotal:
			cur = l.Total
		case LimitInvocations:
			if l.MaxInvocations != 0 && a.value > l.MaxInvocations {
				return Limits{}, fmt.Errorf("%w: %s %d > parent's %d", ErrWiden, a.limit, a.value, l.MaxInvocations)
			}
			if a.value == 0 {
				return Limits{}, fmt.Errorf("%w: %s 0 would remove the limit", ErrWiden, a.limit)
			}
			c.MaxInvocations = a.value
			continue
		default:
			return Limits{}, fmt.Errorf("%w: unknown attenuation %q", ErrBadRequest, a.limit)
		}
		if cur != nil && a.value > *cur {
			return Limits{}, fmt.Errorf("%w: %s %s > parent's %s", ErrWiden, a.limit,
				money.Amount{Units: a.value, Currency: l.Currency}, money.Amount{Units: *cur, Currency: l.Currency})
		}
		v := a.value
		if a.limit == LimitPerInvocation {
			c.PerInvocation = &v
		} else {
			c.Total = &v
		}
	}
	return c, nil
}

// tightens reports why child is not within parent (nil when it is).
func tightens(parent, child Limits) error {
	if parent.Currency != child.Currency {
		return fmt.Errorf("%w: child grant in %s, parent in %s", ErrWiden, child.Currency, parent.Currency)
	}
	within := func(p, c *uint64, name string) error {
		if p != nil && (c == nil || *c > *p) {
			return fmt.Errorf("%w: %s is wider than the parent's", ErrWiden, name)
		}
		return nil
	}
	if err := within(parent.PerInvocation, child.PerInvocation, LimitPerInvocation); err != nil {
		return err
	}
	if err := within(parent.Total, child.Total, LimitTotal); err != nil {
		return err
	}
	if parent.MaxInvocations != 0 && (child.MaxInvocations == 0 || child.MaxInvocations > parent.MaxInvocations) {
		return fmt.Errorf("%w: %s is wider than the parent's", ErrWiden, LimitInvocations)
	}
	return nil
}

// withinRemaining reports why a child issued now would have more than its
// parent has left (nil when it would not): its max_total_cost above the
// parent's unspent total, its max_invocations above the parent's unused.
func withinRemaining(p *grantState, child Limits) error {
	if t := p.limits.Total; t != nil && child.Total != nil {
		left := *t - min(p.charged, *t)
		if *child.Total > left {
			return fmt.Errorf("%w: %s %s is more than the parent's remaining %s", ErrWiden, LimitTotal,
				money.Amount{Units: *child.Total, Currency: child.Currency}, money.Amount{Units: left, Currency: child.Currency})
		}
	}
	if m := p.limits.MaxInvocations; m != 0 && child.MaxInvocations > m-min(p.invocations, m) {
		return fmt.Errorf("%w: %s %d is more than the parent's remaining %d", ErrWiden, LimitInvocations, child.MaxInvocations, m-min(p.invocations, m))
	}
	return nil
}
