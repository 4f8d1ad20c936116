package charge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/guard/tokenguard"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/money"
)

// Ledger is what the charger needs from the budget store.
type Ledger interface {
	budget.Authorizer
	Define(ctx context.Context, g budget.Grant) error
}

// Charger charges tool calls against the manifest's grants.
type Charger struct {
	auth       budget.Authorizer
	grants     map[string]budget.Grant // by tool name
	fees       map[string]money.Amount // declared cost_per_invocation (fee.go)
	policyHash string                  // the manifest's, for every receipt
	agent      string                  // the manifest's agent.id, named in every receipt
}

// Option configures New.
type Option func(*Charger)

// WithPolicyHash sets the receipts' policy_hash: the hash of the manifest
// the calls were decided under (PolicyHash).
func WithPolicyHash(h string) Option { return func(c *Charger) { c.policyHash = h } }

var _ check.Charger = (*Charger)(nil)

// Grants reads the manifest's grants as budget grants of session: grant i
// is keyed (session, i), the scheme klock meter uses too. A grant that sets
// no cost limit is counted in the envelope's currency (else USD).
func Grants(m *policy.Manifest, session string) ([]budget.Grant, error) {
	fallback := "USD"
	if m.CostEnvelope != nil && m.CostEnvelope.MaxCost != nil {
		fallback = m.CostEnvelope.MaxCost.Currency
	}
	parent, err := ParentGrant(m)
	if err != nil {
		return nil, err
	}
	out := make([]budget.Grant, 0, len(m.Grants))
	for i, g := range m.Grants {
		l, err := budget.FromGrant(g, fallback)
		if err != nil {
			return nil, err
		}
		out = append(out, budget.Grant{Key: budget.Key{Capability: session, Grant: uint32(i)}, Limits: l, Tool: g.Tool, Server: g.ServerID, Parent: parent})
	}
	return out, nil
}

// ParentGrant is the grant the manifest's cost_envelope.parent_grant
// delegates from (nil: none): its grants are defined as that grant's
// children (seed 003's delegation).
func ParentGrant(m *policy.Manifest) (*budget.Key, error) {
	if m.CostEnvelope == nil || m.CostEnvelope.ParentGrant == "" {
		return nil, nil
	}
	k, err := budget.ParseKey(m.CostEnvelope.ParentGrant)
	if err != nil {
		return nil, fmt.Errorf("cost_envelope.parent_grant: %w", err)
	}
	return &k, nil
}

// New defines the manifest's grants in the ledger (idempotent across
// restarts: the same limits find the same running totals) and returns the
// charger. The first grant of a tool is the one its calls are charged to.
func New(ctx context.Context, m *policy.Manifest, l Ledger, session string, opts ...Option) (*Charger, error) {
	gs, err := Grants(m, session)
	if err != nil {
		return nil, err
	}
	c := &Charger{auth: l, grants: map[string]budget.Grant{}, fees: fees(m), agent: m.Agent.ID}
	for _, o := range opts {
		o(c)
	}
	for i, g := range gs {
		if err := l.Define(ctx, g); err != nil {
			if g.Parent != nil {
				// Located: the grant and the delegation that refused it.
				return nil, fmt.Errorf("grants[%d] (%s) delegated by cost_envelope.parent_grant %s: %w", i, g.Tool, g.Parent, err)
			}
			return nil, fmt.Errorf("define the budget of grant %s (%s): %w", g.Key, g.Tool, err)
		}
		if _, dup := c.grants[g.Tool]; !dup {
			c.grants[g.Tool] = g
		}
	}
	return c, nil
}

// Charged reports whether calls of tool are charged (it has a grant).
func (c *Charger) Charged(tool string) bool { _, ok := c.grants[tool]; return ok }

type reservation struct {
	hold     budget.Hold
	tool     string
	fee      *money.Amount      // the tool's declared cost_per_invocation
	evidence []receipt.Evidence // the checks that let the call reach its reservation
}

// Reserve pre-charges the grant's worst case for call.
func (c *Charger) Reserve(ctx context.Context, call *check.Call, d *check.Decision) (check.Reservation, error) {
	g, ok := c.grants[call.Tool]
	if !ok {
		return nil, nil
	}
	var params any = call.Args
	if d.Confidential {
		// Never a plain hash of confidential arguments: the gateway's keyed
		// digest, or nothing.
		params = map[string]string{"args_hmac": d.ArgsDigest, "confidential": "true"}
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, toolerr.New(toolerr.InvalidArgs, "budget", "%s: arguments cannot be recorded in a receipt: %v", call.Tool, err)
	}
	ev := d.Evidence
	req := budget.Request{Key: g.Key, Tool: call.Tool, Server: g.Server, Parameters: raw, PolicyHash: c.policyHash, Evidence: ev, AgentID: c.agent}
	res := &reservation{tool: call.Tool, evidence: ev}
	if fee, ok := c.fees[call.Tool]; ok {
		req.Cost, res.fee = reserveFee(g, fee), &fee
	}
	if res.hold, err = c.auth.Reserve(ctx, req); err != nil {
		return nil, reserveErr(call.Tool, err)
	}
	return res, nil
}

func reserveErr(tool string, err error) *toolerr.Error {
	var de *budget.DenyError
	switch {
	case errors.As(err, &de):
		e := toolerr.New(toolerr.Restricted, "budget", "%s refused by its budget: %s %s (grant %s; attempted %s; %s)",
			tool, de.Limit, limitWord(de.Limit), de.Holder, de.Attempted, de.Detail)
		return e
	case errors.Is(err, budget.ErrLedger):
		return toolerr.New(toolerr.InternalError, "ledger", "%s refused: the budget ledger cannot record the charge: %v", tool, err)
	default:
		return toolerr.New(toolerr.InternalError, "budget", "%s refused: the budget could not decide: %v", tool, err)
	}
}

func limitWord(limit string) string {
	if limit == budget.LimitCurrency {
		return "mismatch"
	}
	return "would be exceeded"
}

// Reconcile settles the reservation: the reported cost when the tool gave
// one, else the reservation in full with source unavailable.
func (c *Charger) Reconcile(ctx context.Context, r check.Reservation, u check.Usage) (*check.Charged, error) {
	res, ok := r.(*reservation)
	if !ok || res == nil {
		return nil, nil
	}
	act := &receipt.Actual{TokensOut: receipt.Units(max(u.TokensUsed, 0))}
	actual := res.hold.Reserved
	var breakdown []byte
	var evidence []receipt.Evidence
	if u.Known {
		a, err := money.New(u.CostUnits, u.Currency)
		if err != nil {
			u = check.Usage{Reason: fmt.Sprintf("%s reported a cost in an unknown currency (%v)", res.tool, err)}
		} else {
			actual, breakdown = a, u.Breakdown
			act.Cost, act.Source = receipt.U(a.Units), string(tokenguard.HarnessReported)
		}
	}
	if res.fee != nil && act.Source != "" {
		total, bd, why, ok := withFee(u, *res.fee)
		if ok {
			evidence = append(evidence, feeEvidence(*res.fee, true, actual.String()))
			actual, breakdown, act.Cost = total, bd, receipt.U(total.Units)
		} else {
			actual, breakdown = res.hold.Reserved, nil
			u.Reason, act.Source = why+"; the reservation stays charged", ""
		}
	}
	if res.fee != nil && act.Source == "" {
		evidence = append(evidence, feeEvidence(*res.fee, false, ""))
	}
	if !u.Known || act.Source == "" {
		reason := u.Reason
		if reason == "" {
			reason = res.tool + " reported no cost; the reservation stays charged"
		}
		act = &receipt.Actual{Source: string(tokenguard.Unavailable), UnavailableReason: reason}
	}
	st, err := c.auth.Reconcile(ctx, res.hold.ID, budget.Settle{Actual: actual, CostMeta: &receipt.Cost{Actual: act, Kind: receipt.KindTool},
		Breakdown: breakdown, PolicyHash: c.policyHash, ContentHash: u.ContentHash,
		Evidence: append(append(res.evidence[:len(res.evidence):len(res.evidence)], costEvidence(act, u)), evidence...)})
	if err != nil {
		return nil, err
	}
	return &check.Charged{Units: st.Charged.Units, Currency: st.Charged.Currency, Source: act.Source}, nil
}

// Release reverses the reservation of a call that never reached the tool.
func (c *Charger) Release(ctx context.Context, r check.Reservation, reason string) error {
	res, ok := r.(*reservation)
	if !ok || res == nil {
		return nil
	}
	_, err := c.auth.Release(ctx, res.hold.ID, reason, "gateway")
	return err
}

// EvidenceCostSource is the guard_name of a receipt's evidence of where
// the charged cost came from.
const EvidenceCostSource = "cost-source"

// costEvidence says where the settled cost came from: the tool's report
// (and who made it), or the reservation standing and why.
func costEvidence(act *receipt.Actual, u check.Usage) receipt.Evidence {
	e := receipt.Evidence{GuardName: EvidenceCostSource, Verdict: act.Source == string(tokenguard.HarnessReported)}
	switch {
	case e.Verdict && u.ReportedBy != "":
		e.Details = act.Source + ": reported by " + u.ReportedBy
	case e.Verdict:
		e.Details = act.Source
	default:
		e.Details = act.Source + ": " + act.UnavailableReason
	}
	if len(u.Breakdown) > 0 && e.Verdict {
		e.Details += "; itemized (cost_breakdown), charged as the sum"
	}
	return e
}

// PolicyHash is a manifest's policy_hash: the SHA-256 of the canonical
// bytes its signature covers (policy.CanonicalBytes), so a signed manifest
// and its reformatted copy name one policy.
func PolicyHash(manifest []byte) (string, error) {
	c, err := policy.CanonicalBytes(manifest)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
