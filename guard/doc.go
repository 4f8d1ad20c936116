// Package guard is klock's user-space guard: everything between an agent
// and the tools and models it calls, the cost path included. The kernel
// wall (enforcer) decides what the agent's processes do; the guard decides
// what the agent asks others to do for it.
//
// A tool call (MCP tools/call through mcpproxy, or seed 004's HTTP call
// through toolproxy) travels:
//
//	mcpproxy | toolproxy  parse the call, answer the protocol
//	gateway               one call's whole path, in this order:
//	  check               declared tool, contract, arguments, rate limits,
//	                      autonomy, HITL and the lethal trifecta (pure logic)
//	  approval            a call that needs a human waits in the durable queue
//	  idem                a repeated idempotency key returns the stored result
//	  charge → budget     the grant's worst case is pre-charged, then reconciled
//	  plugin              toolproxy's plugins run under the kernel wall
//	  audit               the hash-chained record of the invocation
//	toolerr               what a refused call becomes: a typed tool error
//	control               governance of a running gateway (disable, limit):
//	                      it only narrows the manifest; ratestate keeps it,
//	                      and the rate-limit counters, across restarts; and
//	                      a killed run's rollback (klock run --gateway)
//	costreport            a tool's reported cost and breakdown, read exactly
//
// A model call (OpenAI- or Anthropic-style, through klock meter) travels:
//
//	meter                 parse the request, estimate its tokens
//	  tokenguard          admit it against the cost envelope, or escalate
//	                      to approval near a limit
//	  budget              pre-charge the worst case, reconcile with usage
//	  receipt             every decision of budget and tokenguard, signed
//	                      and hash-chained
//
// Money (integer minor units under all of it, never a float) is
// policy/money: a leaf below policy, since a manifest's budgets are money.
// Imports point one way: cmd → guard → policy → policy/money. The guard's
// packages read policy, and plugin runs its plugins through
// enforcer/session, never the reverse.
package guard
