package metrics

import (
	"sync"

	"github.com/klocklabs/klock/enforcer/eventlog"
)

// maxPending bounds the approval ids the pending gauge tracks: a gateway
// that died with approvals waiting leaves them counted until klockd
// restarts, and no number of them grows klockd without end.
const maxPending = 10000

// TokensTool is klock_tokens_metered_total's kind for the tokens a tool
// call reported (a gateway's tool.call record, which carries no split).
const TokensTool = "tool"

// pendingApprovals is the set of approval ids asked and not yet decided.
type pendingApprovals struct {
	mu  sync.Mutex
	ids map[string]bool
}

// change adds (asked) or removes id and returns how many wait now.
func (p *pendingApprovals) change(id string, asked bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ids == nil {
		p.ids = map[string]bool{}
	}
	switch {
	case id == "":
	case !asked:
		delete(p.ids, id)
	case len(p.ids) < maxPending:
		p.ids[id] = true
	}
	return len(p.ids)
}

// Publish counts the guard's records that gateways publish to klockd
// (eventlog.Guard kinds): Metrics is an eventlog.Sink beside klockd's
// hub. Each call is counted once, at its end: tool.call as allow (or
// approved, when an approval let it run), tool.denied as deny (or
// escalate, when an approval refused or expired), budget.refused as deny.
// An idempotent replay runs nothing and is not published: replay stays 0
// until gateways report replays.
func (m *Metrics) Publish(r eventlog.Record) {
	if m == nil || r.Tool == nil || !eventlog.Guard(r.Kind) {
		return
	}
	t := r.Tool
	switch r.Kind {
	case eventlog.KindApprovalAsked, eventlog.KindApprovalGiven:
		m.ApprovalsPending(m.pending.change(t.Approval, r.Kind == eventlog.KindApprovalAsked))
	case eventlog.KindToolCall:
		// The spend before the decision: a scrape that sees the call
		// decided sees what it cost.
		if c := t.Charged; c != nil {
			m.BudgetSpent(t.Name, c.Currency, int64(min(c.Units, 1<<62)))
		}
		m.TokensMetered(TokensTool, t.Tokens)
		m.GuardDecision(ifElse(t.Approval != "", GuardApproved, GuardAllow))
	case eventlog.KindToolDenied:
		if t.Approval != "" {
			m.ApprovalsPending(m.pending.change(t.Approval, false))
		}
		m.GuardDecision(ifElse(t.Approval != "", GuardEscalate, GuardDeny))
	case eventlog.KindBudgetRefused:
		m.GuardDecision(GuardDeny)
	}
}

// WantsObserved: the metrics count decisions, never every observed
// triple (eventlog.Sink).
func (m *Metrics) WantsObserved() bool { return false }

func ifElse(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}
