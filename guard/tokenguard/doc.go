// Package tokenguard owns the Token Guard of seed 000 (KCC surface 5): it
// holds each invocation to the agent's cost envelope.
//
//   - Check / Admit: an estimate above any max_* of the envelope is refused;
//     one above 80 % of a max (the threshold is an option) is escalated to
//     human approval through the Approver interface. The approval queue
//     itself lives elsewhere (guard/approval); this package only asks.
//     Without an approver an escalation is refused: never fail open.
//   - Flight: while a call runs, usage is reported to it; crossing a hard
//     limit cancels the call's context with ErrHardLimit as the cause.
//   - Actual: a measured figure always carries its source (harness-reported,
//     api-usage, manual-meter, or unavailable with a reason); an actual
//     without provenance, or an "unavailable" one carrying figures, is
//     rejected (an estimate must never masquerade as an actual).
//   - Report: from signed receipts, flag agents whose actuals keep
//     exceeding their envelope.
//
// All comparisons are integer: tokens are counts, money is money.Amount.
//
// # Errors
//
// ErrRefused (a *RefusedError names the limits), ErrNotApproved (wrapping
// the approver's error: ErrApprovalTimeout, ErrApprovalPending, a denial),
// ErrNoApprover, ErrHardLimit, ErrNoProvenance, ErrFabricated and
// ErrNoEnvelope, all wrapped with %w.
package tokenguard
