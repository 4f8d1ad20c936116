package tokenguard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/money"
)

// Sentinel errors.
var (
	ErrRefused     = errors.New("token guard refused the invocation")
	ErrNotApproved = errors.New("escalated invocation was not approved")
	ErrNoApprover  = errors.New("invocation needs human approval and no approver is configured")
	// ErrApprovalTimeout: nobody decided before the approval deadline (a
	// denial). It is wrapped together with ErrNotApproved.
	ErrApprovalTimeout = errors.New("no human decided before the approval deadline")
	// ErrApprovalPending: the request is still waiting for a human when the
	// caller stopped waiting; the same invocation retried waits on it again.
	ErrApprovalPending = errors.New("invocation waits for human approval")
	ErrHardLimit       = errors.New("hard limit crossed in flight")
	ErrNoEnvelope      = errors.New("no cost envelope")
)

// Verdict of a check.
type Verdict string

// Verdicts.
const (
	Allow    Verdict = "allow"
	Escalate Verdict = "escalate"
	Refuse   Verdict = "refuse"
)

// Limit names, as in the manifest.
const (
	MaxTokensIn  = "max_tokens_in"
	MaxTokensOut = "max_tokens_out"
	MaxLatencyMS = "max_latency_ms"
	MaxCost      = "max_cost"
)

// Estimate is what an invocation is expected to take, before it runs.
type Estimate struct {
	TokensIn, TokensOut, LatencyMS int64
	Cost                           *money.Amount
}

// Decision is a check's outcome: the limits exceeded (refuse) or
// approached (escalate), each as "max_tokens_out: 2100 > 2000".
type Decision struct {
	Verdict  Verdict
	Exceeded []string
	Near     []string
}

// RefusedError is a refusal, naming the limits.
type RefusedError struct{ Decision Decision }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s: over %s", ErrRefused, strings.Join(e.Decision.Exceeded, "; "))
}

func (e *RefusedError) Is(t error) bool { return t == ErrRefused }

// Guard holds invocations to one cost envelope.
type Guard struct {
	env     policy.CostEnvelope
	nearBPS int64
}

// Option configures New.
type Option func(*Guard)

// WithEscalationThreshold sets the share of a max above which an estimate
// is escalated, in basis points (default 8000 = 80 %).
func WithEscalationThreshold(bps int64) Option { return func(g *Guard) { g.nearBPS = bps } }

// New returns a guard for env. A missing envelope is an error: seed 000
// rejects agents without one.
func New(env *policy.CostEnvelope, opts ...Option) (*Guard, error) {
	if env == nil {
		return nil, fmt.Errorf("%w: declare cost_envelope in the manifest", ErrNoEnvelope)
	}
	g := &Guard{env: *env, nearBPS: 8000}
	for _, o := range opts {
		o(g)
	}
	if g.nearBPS <= 0 || g.nearBPS > 10000 {
		return nil, fmt.Errorf("tokenguard: escalation threshold %d bp is not in 1..10000", g.nearBPS)
	}
	return g, nil
}

// Envelope returns the envelope the guard enforces.
func (g *Guard) Envelope() policy.CostEnvelope { return g.env }

// limits lists (name, value, max) for every set max of the envelope.
func (g *Guard) limits(in, out, lat int64, cost *money.Amount) ([]string, []string) {
	var over, near []string
	check := func(name string, v, max uint64, render func(uint64) string) {
		switch {
		case max == 0 && v == 0:
		case v > max:
			over = append(over, fmt.Sprintf("%s: %s > %s", name, render(v), render(max)))
		case mulGT(v, 10000, max, uint64(g.nearBPS)):
			near = append(near, fmt.Sprintf("%s: %s is over %d%% of %s", name, render(v), g.nearBPS/100, render(max)))
		}
	}
	num := func(v uint64) string { return fmt.Sprint(v) }
	if g.env.MaxTokensIn > 0 {
		check(MaxTokensIn, nonneg(in), uint64(g.env.MaxTokensIn), num)
	}
	if g.env.MaxTokensOut > 0 {
		check(MaxTokensOut, nonneg(out), uint64(g.env.MaxTokensOut), num)
	}
	if g.env.MaxLatencyMS > 0 && lat > 0 {
		check(MaxLatencyMS, nonneg(lat), uint64(g.env.MaxLatencyMS), num)
	}
	if m := g.env.MaxCost; m != nil && cost != nil {
		if cost.Currency != m.Currency {
			over = append(over, fmt.Sprintf("%s: cost in %s cannot be held to a %s envelope", MaxCost, cost.Currency, m.Currency))
		} else {
			cur := m.Currency
			check(MaxCost, cost.Units, m.Units, func(v uint64) string { return money.Amount{Units: v, Currency: cur}.String() })
		}
	}
	return over, near
}

// mulGT reports a*b > c*d without overflow.
func mulGT(a, b, c, d uint64) bool {
	ah, al := mul64(a, b)
	ch, cl := mul64(c, d)
	return ah > ch || (ah == ch && al > cl)
}

func nonneg(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

// Check judges an estimate: refuse above any max, escalate above the
// threshold share of any max, else allow.
func (g *Guard) Check(e Estimate) Decision {
	over, near := g.limits(e.TokensIn, e.TokensOut, e.LatencyMS, e.Cost)
	switch {
	case len(over) > 0:
		return Decision{Verdict: Refuse, Exceeded: over, Near: near}
	case len(near) > 0:
		return Decision{Verdict: Escalate, Near: near}
	}
	return Decision{Verdict: Allow}
}

// ApprovalRequest is what a human is asked to approve.
type ApprovalRequest struct {
	Estimate Estimate
	Near     []string // the limits the estimate approaches
	Subject  string   // who or what asks (agent, tool, model)
	// Tool names what is invoked (a model, a tool), for the human.
	Tool string
	// Fingerprint identifies the invocation: a retry of the same one
	// (same fingerprint) waits on the same request. Empty: a new request.
	Fingerprint string
}

// Approver is the seam to the human-approval queue (guard/approval): it
// blocks until a human decides or ctx ends, and returns whether the
// invocation was approved.
type Approver interface {
	Approve(ctx context.Context, req ApprovalRequest) (bool, error)
}

// Admit checks e and, when it must be escalated, asks approver. It returns
// the decision and nil only when the invocation may run.
func (g *Guard) Admit(ctx context.Context, subject string, e Estimate, approver Approver) (Decision, error) {
	return g.AdmitRequest(ctx, ApprovalRequest{Subject: subject, Estimate: e}, approver)
}

// AdmitRequest is Admit with the approval request's Tool and Fingerprint
// filled in by the caller. An approver's error is wrapped next to
// ErrNotApproved, so errors.Is finds ErrApprovalTimeout or
// ErrApprovalPending through it.
func (g *Guard) AdmitRequest(ctx context.Context, req ApprovalRequest, approver Approver) (Decision, error) {
	e := req.Estimate
	d := g.Check(e)
	switch d.Verdict {
	case Refuse:
		return d, &RefusedError{Decision: d}
	case Escalate:
		if approver == nil {
			return d, fmt.Errorf("%w (%s); run with an approval queue or lower the estimate", ErrNoApprover, strings.Join(d.Near, "; "))
		}
		req.Near = d.Near
		ok, err := approver.Approve(ctx, req)
		if err != nil {
			return d, fmt.Errorf("%w: %w", ErrNotApproved, err)
		}
		if !ok {
			return d, fmt.Errorf("%w: %s", ErrNotApproved, strings.Join(d.Near, "; "))
		}
	}
	return d, nil
}
