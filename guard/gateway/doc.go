// Package gateway owns one tool call's whole path through the guard, the
// same for the MCP proxy and the HTTP tool proxy:
//
//	check.Decide → (escalate: approval queue) → idempotency store →
//	leases (WithLeases, optional) → budget reservation (check.Charger,
//	optional) → check.Dispatching (a non-idempotent tool's repeat) →
//	dispatch with the contract's timeout → reconcile → audit
//
// With WithLeases a call holds KLIS leases (enforcer/lease) on what its
// tool's contract touches, else the broader MUTATES of the workdir, from
// before its reservation until it ends (lease.go, KLIS-6 §5): a tool
// cannot change what an agent session holds. Refused, the call gets a
// retryable tool_restricted error, reason lease_conflict, naming the
// holder.
//
// Every call is audited: a refused one with one "decision" record, an
// allowed one with a "dispatch" record written before the tool runs and a
// "result" record after. When the dispatch record cannot be written the
// call is refused (tool_internal_error naming the audit log): the gateway
// never lets an unrecorded effect happen.
//
// The budget (check.Charger, package charge) reserves before the dispatch
// record; the reservation is released when the call never reaches the tool
// (the audit or the approval store failed, or the Dispatch's error wraps
// ErrNotDispatched) and otherwise reconciled, with the tool's reported cost
// or, when there is none or the call failed, the reservation standing as
// unavailable with the reason.
//
// Around the dispatch it enforces what needs the tool's answer or a second
// tool (contract.go): must_belong_to through the contract's lookup tool
// (reached through the proxy's Invoker, itself checked and audited) before
// the reservation; after, the output_schema (a broken output is the tool's
// failure, withheld), the consecutive-error count, the audit_logging.records
// values, and each REVERSIBLE-WRITE's compensation, kept per run and
// journaled beside the audit log (rbjournal.go) for Rollback (rollback.go)
// when the run's session is killed: the control socket's POST
// /runs/{run}/rollback, from klock run --gateway or klock tools rollback.
// Each rollback is audited and, with WithReceipts, receipted.
//
// Confidential arguments (confidential.go, seed 004 §11): the checks see
// a marked argument's plaintext, every record its handle, and the tool
// the handle in a confidential call (the plaintext otherwise); a
// Dispatch sends ToolArgs, never the agent's bytes as they came. A
// confidential call's result text is redacted by the contract's
// audit_logging.redact patterns right after the dispatch.
//
// Error semantics: Call returns the tool's outcome or a *toolerr.Error, never
// a Go error the agent could not read. The gateway never retries a call.
package gateway
