package metrics

import "github.com/prometheus/client_golang/prometheus"

// Guard decision outcomes (klock_guard_decisions_total's outcome label):
// the tool gateway's audit verdicts.
const (
	GuardAllow    = "allow"    // the policy allowed the call
	GuardApproved = "approved" // it escalated and a human approved it
	GuardDeny     = "deny"     // refused (the policy, a budget, must_belong_to)
	GuardEscalate = "escalate" // escalated and not approved (refused, timed out)
	GuardReplay   = "replay"   // an idempotent replay: answered without a dispatch
)

// Token kinds (klock_tokens_metered_total's kind label).
const (
	TokensInput  = "input"
	TokensOutput = "output"
)

// maxGrants bounds the grant label's values: grant ids are declared by
// operators in their budgets, a bounded set, but a record naming more
// than this many distinct grants is counted under "other" rather than
// growing the series without end.
const maxGrants = 256

// maxCurrencies bounds the currency label likewise (ISO 4217 has fewer).
const maxCurrencies = 64

// guardMetrics are the guard's (klock mcp, klock tools serve), fed by the
// records the gateways publish to klockd.
type guardMetrics struct {
	decisions *prometheus.CounterVec
	pending   prometheus.Gauge
	spent     *prometheus.CounterVec
	tokens    *prometheus.CounterVec
	grants    *boundedSet
	curs      *boundedSet
}

func newGuardMetrics(register func(...prometheus.Collector)) guardMetrics {
	g := guardMetrics{
		decisions: prometheus.NewCounterVec(counter("klock_guard_decisions_total",
			"Tool calls the guard decided, by outcome (allow, approved, deny, escalate, replay)."), []string{"outcome"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "klock_approvals_pending",
			Help: "Escalated tool calls waiting for a human's approval."}),
		spent: prometheus.NewCounterVec(counter("klock_budget_spent_minor_units_total",
			"Budget spent, in the currency's minor units (cents for USD), by grant (operator-declared id) and currency (ISO 4217 code)."),
			[]string{"grant", "currency"}),
		tokens: prometheus.NewCounterVec(counter("klock_tokens_metered_total",
			"Model tokens the metering proxy counted, by kind (input, output)."), []string{"kind"}),
		grants: newBoundedSet(maxGrants),
		curs:   newBoundedSet(maxCurrencies),
	}
	register(g.decisions, g.pending, g.spent, g.tokens)
	for _, o := range []string{GuardAllow, GuardApproved, GuardDeny, GuardEscalate, GuardReplay} {
		g.decisions.WithLabelValues(o)
	}
	for _, k := range []string{TokensInput, TokensOutput} {
		g.tokens.WithLabelValues(k)
	}
	return g
}

// GuardDecision counts one guard decision; an outcome outside the
// Guard* set is "other".
func (m *Metrics) GuardDecision(outcome string) {
	if m != nil {
		m.guard.decisions.WithLabelValues(oneOf(outcome, GuardAllow, GuardApproved, GuardDeny, GuardEscalate, GuardReplay)).Inc()
	}
}

// ApprovalsPending sets how many approvals wait now.
func (m *Metrics) ApprovalsPending(n int) {
	if m != nil {
		m.guard.pending.Set(float64(n))
	}
}

// BudgetSpent adds minor units (cents, ...) spent under grant in
// currency. A negative amount (a refund of a reservation) is not counted:
// the counter is what was spent, and only grows.
func (m *Metrics) BudgetSpent(grant, currency string, minor int64) {
	if m == nil || minor <= 0 {
		return
	}
	m.guard.spent.WithLabelValues(m.guard.grants.label(grant), m.guard.curs.label(currency)).Add(float64(minor))
}

// TokensMetered adds n tokens of kind (TokensInput, TokensOutput; others
// are "other").
func (m *Metrics) TokensMetered(kind string, n int64) {
	if m != nil && n > 0 {
		m.guard.tokens.WithLabelValues(oneOf(kind, TokensInput, TokensOutput)).Add(float64(n))
	}
}
