// Package toolproxy owns seed 004's HTTP tool proxy for tools that do not
// speak MCP:
//
//	POST /v1/tools/call  {"tool": "...", "args": {...}, "context": {...}}
//	  → 200 {"ok": true, "output": ..., "tokens_used": N, "cost": {...}|null, "charged": {...}}
//	  → 4xx/5xx {"ok": false, "error_class": "...", "retryable": ..., "message": "...", ...}
//	GET  /v1/tools       the tools this agent may call now (declared, enabled, provided)
//
// Every call goes through the same guard/gateway path as klock mcp: the
// check pipeline, human approval, idempotency, the budget, the audit log.
// The tool itself is reached through a Provider (package plugin runs
// plugins under klock sessions).
//
// The request's context carries the call's bindings (must_match) and its
// team_id; it is written by the agent runtime, not the model. Context the
// operator fixed when starting the proxy wins over the request's. The run
// (per_run limits, the audit) is the proxy's, not the request's: one per
// proxy, or the operator's --run-id; agent_run_id is overwritten with it,
// since a caller that chose its own run id could reset per_run at will.
//
// Error semantics: every failure reaches the client as a typed
// {ok:false, error_class, retryable, message} body with one of seed 004's
// six classes: a request that cannot be decoded is tool_invalid_args
// (DecodeRequest returns ErrRequest), a declared tool nobody provides is
// tool_internal_error (reason no_provider), everything else is the
// gateway's *toolerr.Error. cost is the cost the tool reported (null when
// it reported none: never estimated); charged is what the budget charged,
// with its source (harness-reported, or unavailable when the reservation
// stood).
package toolproxy
