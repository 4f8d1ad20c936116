// Package charge owns the join between the tool gateway and the budget: it
// implements check.Charger on top of budget.Authorizer, charging every
// declared tool call whose tool has a grant in the manifest (grants: tool,
// max_cost_per_invocation, max_total_cost, max_invocations).
//
// Before dispatch the grant's worst case (its max_cost_per_invocation, or
// nothing when it sets none) is pre-charged and the three limits are
// checked atomically by the ledger; once the tool ran, the reservation is
// reconciled with the cost the tool reported (source harness-reported) or,
// when it reported none, left standing in full with source unavailable and
// the reason; when a later refusal kept the call from the tool it is
// released. Every one of those decisions, the refusals included, is a
// signed receipt written by the budget store, naming the manifest
// (policy_hash, WithPolicyHash), the call's content (content_hash, which
// the gateway computes, keyed in confidential mode) and where the charged
// cost came from (evidence "cost-source"); a tool's breakdown is copied
// into cost_breakdown. A tool's declared cost_per_invocation in money is a
// fee charged on top of the reported cost and itemized (fee.go). A tool
// without a grant is not charged and leaves no receipt.
//
// Error semantics: Reserve returns a *toolerr.Error: tool_restricted
// (reason "budget") naming the limit when the budget refuses,
// tool_internal_error (reason "ledger") when the ledger or the receipt log
// cannot be written (the call is refused: never fail open), and
// tool_internal_error (reason "budget") for a request the ledger rejects
// (no rate for the tool's currency, an unknown grant). Reconcile and
// Release return the budget's errors; an unsettled hold stays charged.
package charge
