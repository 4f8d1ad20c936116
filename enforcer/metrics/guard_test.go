package metrics

import (
	"fmt"
	"strings"
	"testing"
)

// The guard's metrics take plain values and keep their labels bounded:
// unknown outcomes and kinds are "other", grants past maxGrants and
// invalid values are "other", refunds are not spending.
func TestGuardMetrics(t *testing.T) {
	m := New()
	for _, o := range []string{GuardAllow, GuardAllow, GuardDeny, GuardApproved, GuardEscalate, GuardReplay, "/some/path"} {
		m.GuardDecision(o)
	}
	m.ApprovalsPending(3)
	m.ApprovalsPending(2)
	m.BudgetSpent("ci-nightly", "USD", 1250)
	m.BudgetSpent("ci-nightly", "USD", 50)
	m.BudgetSpent("ci-nightly", "USD", -300)
	m.BudgetSpent("ci-nightly", "EUR", 7)
	for i := range maxGrants + 5 {
		m.BudgetSpent(fmt.Sprintf("g%d", i), "USD", 1)
	}
	m.BudgetSpent("\xff", "USD", 1)
	m.BudgetSpent(strings.Repeat("x", 65), "USD", 1)
	m.TokensMetered(TokensInput, 1000)
	m.TokensMetered(TokensOutput, 20)
	m.TokensMetered("cache_read", 5)
	m.TokensMetered(TokensInput, -1)
	for name, want := range map[string]float64{
		`klock_guard_decisions_total{outcome="allow"}`:                            2,
		`klock_guard_decisions_total{outcome="deny"}`:                             1,
		`klock_guard_decisions_total{outcome="approved"}`:                         1,
		`klock_guard_decisions_total{outcome="escalate"}`:                         1,
		`klock_guard_decisions_total{outcome="replay"}`:                           1,
		`klock_guard_decisions_total{outcome="other"}`:                            1,
		`klock_approvals_pending`:                                                 2,
		`klock_budget_spent_minor_units_total{grant="ci-nightly",currency="USD"}`: 1300,
		`klock_budget_spent_minor_units_total{grant="ci-nightly",currency="EUR"}`: 7,
		`klock_budget_spent_minor_units_total{grant="g0",currency="USD"}`:         1,
		// ci-nightly and g0..g254 take the 256 grants; g255..g260, the
		// invalid and the overlong are other.
		`klock_budget_spent_minor_units_total{grant="other",currency="USD"}`: 8,
		`klock_tokens_metered_total{kind="input"}`:                           1000,
		`klock_tokens_metered_total{kind="output"}`:                          20,
		`klock_tokens_metered_total{kind="other"}`:                           5,
	} {
		if got := series(t, m, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	var nilM *Metrics
	nilM.GuardDecision(GuardAllow) // a nil *Metrics records nothing
	nilM.BudgetSpent("g", "USD", 1)
}
