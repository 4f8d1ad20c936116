package fleetbudget

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

// exhausted: the fleet grant cannot cover a call.
type exhausted struct{ limit, detail string }

func (e *exhausted) Error() string { return e.limit + ": " + e.detail }

// snapshot is a grant's counters, read under g.mu.
type snapshot struct {
	usedInv, usedUnits, allocInv, allocUnits uint64
	synced                                   bool
}

func (g *grant) snapshot() snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	return snapshot{g.usedInv, g.usedUnits, g.allocInv, g.allocUnits, g.synced}
}

// need is how much of v more than base a use of used+want requires.
func need(used, want, base uint64) uint64 {
	if used+want > base {
		return used + want - base
	}
	return 0
}

// blockOf sizes one limit's take: at least the need, else up to the
// remainder shared among twice the members, and no more than target of
// headroom in all. It is nil-free: limit 0 means the limit is not set.
func blockOf(rem, needed, headroom, target uint64, members int) uint64 {
	share := rem / uint64(2*max(members, 1))
	want := uint64(0)
	if target > headroom {
		want = min(share, target-headroom)
	}
	return min(max(needed, want), rem)
}

// update writes this member's share of g: with inv or units, a block
// that covers them (taking only when the present one cannot); with
// neither, its allocation as it stands (joining the grant at Define).
func (l *Ledger) update(ctx context.Context, g *grant, inv, units uint64) error {
	octx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	var wrote Member
	take := inv != 0 || units != 0
	_, err := cas(octx, l.cli, g.etcdKey, func(r *Record) error {
		if err := l.checkLimits(r, g); err != nil {
			return err
		}
		me := r.Members[l.cfg.member]
		if me == nil {
			me = &Member{}
			r.Members[l.cfg.member] = me
		}
		s := g.snapshot()
		baseInv, baseUnits := s.allocInv, s.allocUnits
		if !s.synced { // resume the allocation etcd keeps for this member
			baseInv, baseUnits = me.Invocations, me.Units
		}
		baseInv, baseUnits = max(baseInv, s.usedInv), max(baseUnits, s.usedUnits)
		othInv, othUnits := r.allocated(l.cfg.member)
		addInv, addUnits := uint64(0), uint64(0)
		if take {
			var err error
			if addInv, addUnits, err = l.sizeBlock(g, r, s, inv, units, [4]uint64{baseInv, baseUnits, othInv, othUnits}); err != nil {
				return err
			}
		}
		*me = Member{Invocations: baseInv + addInv, Units: baseUnits + addUnits, UsedInvocations: s.usedInv, UsedUnits: s.usedUnits,
			At: l.cfg.now().UTC().Format(time.RFC3339Nano)}
		wrote = *me
		return nil
	})
	if err != nil {
		return l.updateErr(ctx, g, err)
	}
	g.mu.Lock()
	g.allocInv, g.allocUnits, g.synced = wrote.Invocations, wrote.Units, true
	g.mu.Unlock()
	return nil
}

// sizeBlock decides a take: b holds this member's base allocation
// (invocations, units) and the other members' allocations.
func (l *Ledger) sizeBlock(g *grant, r *Record, s snapshot, inv, units uint64, b [4]uint64) (uint64, uint64, error) {
	baseInv, baseUnits, othInv, othUnits := b[0], b[1], b[2], b[3]
	var addInv, addUnits uint64
	if m := g.limits.MaxInvocations; m != 0 {
		rem := m - min(m, othInv+baseInv)
		n := need(s.usedInv, inv, baseInv)
		if n > rem {
			return 0, 0, &exhausted{budget.LimitInvocations, fmt.Sprintf("fleet-wide %d of %d invocations are allocated (%d to other hosts, %d to this one, which has used %d)",
				m-rem, m, othInv, baseInv, s.usedInv)}
		}
		addInv = blockOf(rem, n, baseInv-s.usedInv, l.cfg.block, len(r.Members))
	}
	if t := g.limits.Total; t != nil {
		cur := g.limits.Currency
		rem := *t - min(*t, othUnits+baseUnits)
		n := need(s.usedUnits, units, baseUnits)
		if n > rem {
			return 0, 0, &exhausted{budget.LimitTotal, fmt.Sprintf("fleet-wide %s of %s is allocated (%s to other hosts, %s to this one, which has used %s)",
				amt(*t-rem, cur), amt(*t, cur), amt(othUnits, cur), amt(baseUnits, cur), amt(s.usedUnits, cur))}
		}
		per := max(units, 1)
		if p := g.limits.PerInvocation; p != nil {
			per = max(*p, 1)
		}
		addUnits = blockOf(rem, n, baseUnits-s.usedUnits, l.cfg.block*per, len(r.Members))
	}
	return addInv, addUnits, nil
}

func amt(u uint64, cur string) string { return money.Amount{Units: u, Currency: cur}.String() }

// checkLimits sets a new record's limits, or checks an existing one's.
func (l *Ledger) checkLimits(r *Record, g *grant) error {
	if r.Currency == "" && len(r.Members) == 0 {
		r.Currency, r.MaxInvocations = g.limits.Currency, g.limits.MaxInvocations
		if t := g.limits.Total; t != nil {
			v := *t
			r.MaxTotalCost = &v
		}
		return nil
	}
	if !r.sameLimits(g.limits) {
		return fmt.Errorf("%w: %s: the fleet has it with max_invocations %d, max_total_cost %v %s; a changed manifest needs a new session id on every host",
			ErrGrantChanged, g.key, r.MaxInvocations, derefOr(r.MaxTotalCost), r.Currency)
	}
	return nil
}

func derefOr(p *uint64) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// updateErr types a failed update: a refusal stays one, an error of the
// caller's context is the caller's, anything else is etcd unreachable.
func (l *Ledger) updateErr(ctx context.Context, g *grant, err error) error {
	var ex *exhausted
	switch {
	case errors.As(err, &ex), errors.Is(err, ErrGrantChanged), errors.Is(err, ErrCorrupt):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("%w: %w: grant %s needs a new block from the fleet's etcd (prefix %s, this ledger is member %q), which did not answer within %v (%v); calls the host's block covers still run: restore the etcd cluster's quorum (etcdctl endpoint health) and calls go through again",
		ErrUnavailable, budget.ErrLedger, g.key, l.cfg.prefix, l.cfg.member, l.cfg.timeout, err)
}

// refuse answers a call the fleet did not cover: a fleet-wide limit is a
// *budget.DenyError, with a signed deny receipt in the local chain; an
// unreachable etcd is receipted too and returned as is.
func (l *Ledger) refuse(ctx context.Context, g *grant, req budget.Request, units uint64, err error) error {
	var ex *exhausted
	limit, detail := "fleet", err.Error()
	if errors.As(err, &ex) {
		limit, detail = ex.limit, ex.detail
	} else if !errors.Is(err, ErrUnavailable) {
		return err
	}
	tool, server := req.Tool, req.Server
	if tool == "" {
		tool = g.tool
	}
	if server == "" {
		server = g.server
	}
	rc := &receipt.Receipt{CapabilityID: g.key.Capability, ToolName: tool, ToolServer: server, Phase: receipt.PhasePreCharge,
		PolicyHash: req.PolicyHash, Action: receipt.Action{Parameters: req.Parameters, ParameterHash: paramHash(req.Parameters)},
		Decision: receipt.Decision{Verdict: receipt.Deny, Reason: limit + ": " + detail, Guard: "budget"}}
	rc.Metadata.Cost = req.CostMeta
	rc.Metadata.Financial = &receipt.Financial{GrantIndex: g.key.Grant, Currency: g.limits.Currency, RootBudgetHolder: g.key.Capability,
		SettlementStatus: receipt.NotApplicable, AttemptedCost: receipt.U(units)}
	if rerr := l.store.Record(ctx, rc); rerr != nil {
		return errors.Join(err, rerr)
	}
	if ex == nil {
		return err
	}
	return &budget.DenyError{Key: req.Key, Limit: ex.limit, Holder: g.key, Attempted: amt(units, g.limits.Currency), Detail: ex.detail, Receipt: rc}
}
