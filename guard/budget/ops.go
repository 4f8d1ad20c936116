package budget

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

type opKind int

const (
	opDefine opKind = iota
	opReserve
	opReconcile
	opRelease
	opRecord
)

type op struct {
	kind   opKind
	grant  Grant
	req    Request
	holdID string
	settle Settle
	reason string
	guard  string
	rec    *receipt.Receipt
	res    result
	done   chan struct{}
}

type result struct {
	hold       Hold
	settlement Settlement
	receipt    *receipt.Receipt
	err        error
}

type event struct {
	id uint64
	r  *receipt.Receipt
	p  *receipt.Prepared // r canonicalized at commit: the ledger's row and the chain's input
}

// view is one transaction's copy-on-write picture of the ledger: the ops of
// a batch see each other's effects, and the Store's memory changes only
// after the transaction commits.
type view struct {
	s      *Store
	q      querier // SQLite, for grants and holds not in memory
	grants map[Key]*grantState
	holds  map[string]*holdState
	events []*event
	nextEv uint64
}

// errInfra marks errors that must abort the whole transaction.
type errInfra struct{ err error }

func (e errInfra) Error() string { return e.err.Error() }

func (v *view) grant(k Key) (*grantState, error) {
	if g, ok := v.grants[k]; ok {
		return g, nil
	}
	g, ok := v.s.grants[k]
	if !ok {
		var err error
		if g, err = loadGrant(v.q, k); err != nil {
			return nil, errInfra{err}
		}
		if g == nil {
			return nil, nil
		}
	}
	c := *g
	v.grants[k] = &c
	return &c, nil
}

func (v *view) hold(id string) (*holdState, error) {
	if h, ok := v.holds[id]; ok {
		return h, nil
	}
	h, ok := v.s.holds[id]
	if !ok {
		var err error
		if h, err = loadHold(v.q, id); err != nil {
			return nil, errInfra{err}
		}
		if h == nil {
			return nil, nil
		}
	}
	c := *h
	v.holds[id] = &c
	return &c, nil
}

// chain returns the grant and its ancestors, leaf first.
func (v *view) chain(k Key) ([]*grantState, error) {
	var out []*grantState
	for cur := &k; cur != nil; {
		g, err := v.grant(*cur)
		if err != nil {
			return nil, err
		}
		if g == nil {
			return nil, fmt.Errorf("%w: %s (define it from the manifest's grants first)", ErrUnknownGrant, cur)
		}
		out = append(out, g)
		if len(out) > 64 {
			return nil, fmt.Errorf("%w: delegation chain of %s deeper than 64", ErrBadRequest, k)
		}
		cur = g.parent
	}
	return out, nil
}

func (v *view) emit(r *receipt.Receipt) {
	v.nextEv++
	r.LedgerEvent = v.nextEv
	r.ID = "rcpt-" + strconv.FormatUint(v.nextEv, 10)
	now := v.s.cfg.now()
	r.Timestamp, r.Time = now.Unix(), now.UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
	if r.AgentID == "" {
		r.AgentID = v.s.cfg.agentID
	}
	if r.PolicyHash == "" {
		r.PolicyHash = v.s.cfg.policy
	}
	v.events = append(v.events, &event{id: v.nextEv, r: r})
}

func (v *view) apply(o *op) (err error) {
	switch o.kind {
	case opDefine:
		o.res.err = v.define(o.grant)
	case opReserve:
		o.res.hold, o.res.err = v.reserve(o.req)
	case opReconcile:
		o.res.settlement, o.res.err = v.reconcile(o.holdID, o.settle)
	case opRelease:
		o.res.receipt, o.res.err = v.release(o.holdID, o.reason, o.guard)
	case opRecord:
		if o.rec == nil || o.rec.Decision.Verdict == "" {
			o.res.err = fmt.Errorf("%w: a recorded receipt needs a decision verdict", ErrBadRequest)
			break
		}
		c := *o.rec
		if c.Phase == "" {
			c.Phase = receipt.PhaseGuard
		}
		v.emit(&c)
		*o.rec = c
	}
	var inf errInfra
	if errors.As(o.res.err, &inf) {
		return inf.err
	}
	return nil
}

func (v *view) define(d Grant) error {
	if _, err := money.Exponent(d.Limits.Currency); err != nil {
		return fmt.Errorf("%w: grant %s: %v", ErrBadRequest, d.Key, err)
	}
	g := &grantState{key: d.Key, limits: d.Limits, tool: d.Tool, server: d.Server, root: d.RootHolder}
	old, err := v.grant(d.Key)
	if err != nil {
		return err
	}
	if d.Parent != nil {
		p, err := v.grant(*d.Parent)
		if err != nil {
			return err
		}
		if p == nil {
			return fmt.Errorf("%w: parent %s of %s", ErrUnknownGrant, d.Parent, d.Key)
		}
		if err := tightens(p.limits, d.Limits); err != nil {
			return fmt.Errorf("delegating %s from %s: %w", d.Key, p.key, err)
		}
		if old == nil {
			// Issued now: within what the parent has left, not only its
			// limits (seed 003: a child never widens the budget).
			if err := withinRemaining(p, d.Limits); err != nil {
				return fmt.Errorf("delegating %s from %s: %w", d.Key, p.key, err)
			}
		}
		pk := p.key
		g.parent, g.depth, g.root = &pk, p.depth+1, p.root
	} else if g.root == "" {
		g.root = d.Key.Capability
	}
	if old != nil {
		same := old.limits.equal(d.Limits) && (old.parent == nil) == (g.parent == nil) && (old.parent == nil || *old.parent == *g.parent)
		if !same {
			return fmt.Errorf("%w: %s; a changed manifest needs a new capability (session) id", ErrGrantChanged, d.Key)
		}
		return nil
	}
	v.grants[d.Key] = g
	return nil
}

func paramHash(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	s := sha256.Sum256(p)
	return "sha256:" + hex.EncodeToString(s[:])
}

func (v *view) financial(leaf *grantState, chain []*grantState) *receipt.Financial {
	f := &receipt.Financial{GrantIndex: leaf.key.Grant, Currency: leaf.limits.Currency, DelegationDepth: leaf.depth,
		RootBudgetHolder: leaf.root, InvocationsUsed: receipt.Units(leaf.invocations)}
	if leaf.parent != nil {
		f.ParentGrant = leaf.parent.String()
	}
	if leaf.limits.Total != nil {
		f.BudgetTotal = receipt.U(*leaf.limits.Total)
		rem := uint64(0)
		if *leaf.limits.Total > leaf.charged {
			rem = *leaf.limits.Total - leaf.charged
		}
		f.BudgetRemaining = receipt.U(rem)
	}
	return f
}

func (v *view) baseReceipt(g *grantState, tool, server string, phase string) *receipt.Receipt {
	if tool == "" {
		tool = g.tool
	}
	if server == "" {
		server = g.server
	}
	return &receipt.Receipt{CapabilityID: g.key.Capability, ToolName: tool, ToolServer: server, Phase: phase}
}

func (v *view) reserve(req Request) (Hold, error) {
	chain, err := v.chain(req.Key)
	if err != nil {
		var inf errInfra
		if !errors.As(err, &inf) {
			rc := &receipt.Receipt{CapabilityID: req.Key.Capability, ToolName: req.Tool, ToolServer: req.Server, Phase: receipt.PhasePreCharge,
				Action:   receipt.Action{Parameters: req.Parameters, ParameterHash: paramHash(req.Parameters)},
				Decision: receipt.Decision{Verdict: receipt.Deny, Reason: err.Error(), Guard: "budget"}}
			v.emit(rc)
		}
		return Hold{}, err
	}
	leaf := chain[0]
	rc := v.baseReceipt(leaf, req.Tool, req.Server, receipt.PhasePreCharge)
	rc.AgentID = req.AgentID
	rc.Action = receipt.Action{Parameters: req.Parameters, ParameterHash: paramHash(req.Parameters)}
	rc.Metadata.Cost = req.CostMeta
	rc.PolicyHash, rc.Evidence = req.PolicyHash, append([]receipt.Evidence(nil), req.Evidence...)
	fin := v.financial(leaf, chain)
	rc.Metadata.Financial = fin

	cost := req.Cost
	if cost.Currency == "" {
		cost = money.Amount{Currency: leaf.limits.Currency}
		if leaf.limits.PerInvocation != nil {
			cost.Units = *leaf.limits.PerInvocation
		}
	}
	deny := func(limit string, holder *grantState, detail string) (Hold, error) {
		rc.Decision = receipt.Decision{Verdict: receipt.Deny, Reason: limit + ": " + detail, Guard: "budget"}
		rc.Evidence = append(rc.Evidence, receipt.Evidence{GuardName: "budget", Verdict: false, Details: fmt.Sprintf("grant %s: %s: %s", holder.key, limit, detail)})
		fin.SettlementStatus = receipt.NotApplicable
		fin.AttemptedCost = receipt.U(cost.Units)
		v.emit(rc)
		return Hold{}, &DenyError{Key: req.Key, Limit: limit, Holder: holder.key, Attempted: cost.String(), Detail: detail, Receipt: rc}
	}
	if cost.Currency != leaf.limits.Currency {
		rate, ok := v.s.cfg.rates.lookup(cost.Currency, leaf.limits.Currency)
		if !ok {
			return deny(LimitCurrency, leaf, fmt.Sprintf("%s cost for a %s grant and %s: configure a %s->%s rate",
				cost.Currency, leaf.limits.Currency, ErrNoRate, cost.Currency, leaf.limits.Currency))
		}
		conv, err := rate.Convert(cost)
		if err != nil {
			return deny(LimitCurrency, leaf, err.Error())
		}
		fin.OriginalCost = &receipt.OriginalAmount{Units: receipt.Units(cost.Units), Currency: cost.Currency}
		fin.OracleEvidence = rate.oracle()
		rc.Evidence = append(rc.Evidence, v.s.cfg.rates.evidence(rate))
		cost = conv
	}
	if p := leaf.limits.PerInvocation; p != nil && cost.Units > *p {
		return deny(LimitPerInvocation, leaf, fmt.Sprintf("%s exceeds the per-call limit %s", cost, money.Amount{Units: *p, Currency: cost.Currency}))
	}
	for _, g := range chain {
		if g.limits.MaxInvocations != 0 && g.invocations >= g.limits.MaxInvocations {
			return deny(LimitInvocations, g, fmt.Sprintf("%d of %d invocations used", g.invocations, g.limits.MaxInvocations))
		}
		if t := g.limits.Total; t != nil && (g.charged > *t || cost.Units > *t-g.charged) {
			return deny(LimitTotal, g, fmt.Sprintf("%s charged, %s more would pass %s",
				money.Amount{Units: g.charged, Currency: cost.Currency}, cost, money.Amount{Units: *t, Currency: cost.Currency}))
		}
	}
	for _, g := range chain {
		if g.charged+cost.Units < g.charged { // only possible without a total limit
			return deny(LimitTotal, g, fmt.Sprintf("%s more would overflow the charged total", cost))
		}
	}
	for _, g := range chain {
		g.invocations++
		g.charged += cost.Units
	}
	h := &holdState{key: leaf.key, reserved: cost.Units, open: true, tool: rc.ToolName, agent: req.AgentID}
	nf := v.financial(leaf, chain)
	nf.CostCharged, nf.LedgerDebit, nf.InvocationDelta = receipt.Units(cost.Units), receipt.Units(cost.Units), 1
	nf.SettlementStatus, nf.OriginalCost, nf.OracleEvidence = receipt.Pending, fin.OriginalCost, fin.OracleEvidence
	rc.Metadata.Financial = nf
	rc.Decision = receipt.Decision{Verdict: receipt.Allow}
	rc.Evidence = append(rc.Evidence, budgetEvidence(chain, cost))
	v.emit(rc)
	h.id = "hold-" + strconv.FormatUint(rc.LedgerEvent, 10)
	nf.HoldID = h.id
	v.holds[h.id] = h
	return Hold{ID: h.id, Key: leaf.key, Reserved: cost, Receipt: rc}, nil
}

func (v *view) openHold(id string) (*holdState, []*grantState, error) {
	h, err := v.hold(id)
	if err != nil {
		return nil, nil, err
	}
	if h == nil || !h.open {
		return nil, nil, fmt.Errorf("%w: %q (unknown, or already reconciled or released)", ErrHoldNotOpen, id)
	}
	chain, err := v.chain(h.key)
	if err != nil {
		return nil, nil, err
	}
	return h, chain, nil
}

func (v *view) reconcile(id string, st Settle) (Settlement, error) {
	h, chain, err := v.openHold(id)
	if err != nil {
		return Settlement{}, err
	}
	leaf := chain[0]
	actual := st.Actual
	if actual.Currency == "" {
		return Settlement{}, fmt.Errorf("%w: reconcile %s: the actual cost needs a currency", ErrBadRequest, id)
	}
	var evidence *receipt.OracleEvidence
	var orig *receipt.OriginalAmount
	var extra map[string]string
	var rateEv []receipt.Evidence
	if actual.Currency != leaf.limits.Currency {
		orig = &receipt.OriginalAmount{Units: receipt.Units(actual.Units), Currency: actual.Currency}
		rate, ok := v.s.cfg.rates.lookup(actual.Currency, leaf.limits.Currency)
		var conv money.Amount
		var cerr error
		if ok {
			conv, cerr = rate.Convert(actual)
		}
		if !ok || cerr != nil {
			// The tool ran and its cost cannot be converted: a hold left
			// open would be money neither spent nor free. It settles at
			// the worst case reserved before dispatch, which the budget
			// already allowed, and the receipt says so and why.
			why := fmt.Sprintf("%s: no %s->%s rate is configured (--rates, or the manifest's rates)", ErrNoRate, actual.Currency, leaf.limits.Currency)
			if cerr != nil {
				why = fmt.Sprintf("the %s->%s rate cannot convert %s: %v", actual.Currency, leaf.limits.Currency, actual, cerr)
			}
			extra = map[string]string{ExtraSettledAt: SettledAtReservation, ExtraSettledWhy: why}
			conv = money.Amount{Units: h.reserved, Currency: leaf.limits.Currency}
		} else {
			evidence = rate.oracle()
			rateEv = append(rateEv, v.s.cfg.rates.evidence(rate))
		}
		actual = conv
	}
	out := Settlement{Charged: actual, Status: receipt.Settled}
	var debit, credit uint64
	if actual.Units <= h.reserved {
		credit = h.reserved - actual.Units
		out.Credit = credit
	} else {
		debit = actual.Units - h.reserved
		out.Overrun, out.Status = debit, receipt.Failed
	}
	for _, g := range chain {
		if g.charged+debit < g.charged {
			return Settlement{}, fmt.Errorf("%w: overrun overflows the charged total of %s", ErrBadRequest, g.key)
		}
		g.charged = g.charged + debit - credit
	}
	h.open = false
	rc := v.baseReceipt(leaf, h.tool, "", receipt.PhaseReconcile)
	rc.AgentID = h.agent
	rc.Decision = receipt.Decision{Verdict: receipt.Allow}
	rc.Metadata.Cost = st.CostMeta
	rc.Evidence = append(rateEv, st.Evidence...)
	rc.PolicyHash, rc.ContentHash = st.PolicyHash, st.ContentHash
	f := v.financial(leaf, chain)
	f.CostCharged, f.LedgerDebit, f.LedgerCredit = receipt.Units(actual.Units), receipt.Units(debit), receipt.Units(credit)
	f.SettlementStatus, f.HoldID, f.CostBreakdown, f.PaymentReference = out.Status, id, st.Breakdown, st.PaymentReference
	f.OracleEvidence, f.OriginalCost, f.Extra = evidence, orig, extra
	if debit > 0 {
		f.Overrun = receipt.U(debit)
	}
	rc.Metadata.Financial = f
	v.emit(rc)
	out.Receipt = rc
	return out, nil
}

func (v *view) release(id, reason, guard string) (*receipt.Receipt, error) {
	h, chain, err := v.openHold(id)
	if err != nil {
		return nil, err
	}
	for _, g := range chain {
		g.charged -= h.reserved
		g.invocations--
	}
	h.open = false
	leaf := chain[0]
	rc := v.baseReceipt(leaf, h.tool, "", receipt.PhaseReverse)
	rc.AgentID = h.agent
	rc.Decision = receipt.Decision{Verdict: receipt.Deny, Reason: reason, Guard: guard}
	rc.Evidence = []receipt.Evidence{{GuardName: guard, Verdict: false, Details: "reversed hold " + id + ": " + reason}}
	f := v.financial(leaf, chain)
	f.LedgerCredit, f.InvocationDelta, f.HoldID, f.SettlementStatus = receipt.Units(h.reserved), -1, id, receipt.NotApplicable
	rc.Metadata.Financial = f
	v.emit(rc)
	return rc, nil
}

// budgetEvidence is an allowed pre-charge's: what was reserved and what
// each grant of the chain (the leaf, then its delegating ancestors) has
// left after it.
func budgetEvidence(chain []*grantState, cost money.Amount) receipt.Evidence {
	d := "reserved " + cost.String()
	for _, g := range chain {
		d += "; grant " + g.key.String() + ":"
		if t := g.limits.Total; t != nil {
			d += fmt.Sprintf(" %s of max_total_cost %s left,", money.Amount{Units: *t - min(g.charged, *t), Currency: g.limits.Currency}, money.Amount{Units: *t, Currency: g.limits.Currency})
		}
		if g.limits.MaxInvocations != 0 {
			d += fmt.Sprintf(" %d of %d invocations used,", g.invocations, g.limits.MaxInvocations)
		}
		d = strings.TrimSuffix(d, ",")
	}
	return receipt.Evidence{GuardName: "budget", Verdict: true, Details: d}
}
