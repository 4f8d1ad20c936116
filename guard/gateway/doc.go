// Package gateway owns one tool call's whole path through the guard, the
// same for the MCP proxy and the HTTP tool proxy:
//
//	check.Decide → (escalate: approval queue) → idempotency store →
//	budget reservation (check.Charger, optional) → dispatch with the
//	contract's timeout → reconcile → audit
//
// Every call is audited: a refused one with one "decision" record, an
// allowed one with a "dispatch" record written before the tool runs and a
// "result" record after. When the dispatch record cannot be written the
// call is refused (tool_internal_error naming the audit log): the gateway
// never lets an unrecorded effect happen.
//
// Error semantics: Call returns the tool's outcome or a *toolerr.Error, never
// a Go error the agent could not read. The gateway never retries a call.
package gateway
