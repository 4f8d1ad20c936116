// Package guard is klock's user-space guard: the tool gateway that stands
// between an agent and its tools. Each capability lives in its own package:
//
//	toolerr    typed tool errors {ok:false, error_class, retryable, message}
//	check      the ordered, cheapest-first check pipeline (pure logic)
//	audit      the hash-chained JSONL audit log of every invocation
//	approval   the durable human-approval (HITL) queue
//	idem       the durable idempotency store
//	gateway    one call's whole path: check, approval, idempotency, dispatch, audit
//	mcpproxy   the MCP proxy (stdio and streamable HTTP)
//	toolproxy  the HTTP tool proxy of seed 004 and its plugins
//	control    the unix control socket of a running gateway (governance)
//
// Data flows one way: manifest → policy → guard. policy never imports guard.
package guard
