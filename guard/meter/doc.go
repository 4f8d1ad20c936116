// Package meter owns the model-call metering proxy: a reverse proxy for
// OpenAI-style (/v1/chat/completions, /v1/responses) and Anthropic-style
// (/v1/messages) APIs, streaming (SSE) included, that puts every model call
// through the Token Guard and the budget:
//
//  1. parse the request (ParseRequest) and estimate its input tokens from
//     its size (an estimate, labelled as one in the receipt);
//  2. admit it with the Token Guard (refuse over a max, escalate near one
//     to the Approver, klock meter's being the guard/approval queue; a
//     refusal's class is token_guard, approval_denied, approval_timeout or
//     the retryable approval_pending);
//  3. cap its output tokens to what the envelope and the remaining budget
//     allow, rewriting max_tokens / max_completion_tokens /
//     max_output_tokens, and ask OpenAI chat streams to report usage;
//  4. pre-charge the worst case (input estimate + capped output, priced
//     from the configured table in integer micro-units per token);
//  5. forward, relaying SSE events as they arrive while counting output;
//     a stream that crosses the Token Guard's hard limit or the reservation
//     is cut: the upstream request is cancelled and the client gets a final
//     "klock_budget_exceeded" error event;
//  6. reconcile with the usage the API reported (source api-usage); when
//     none was reported (a cut stream, an API that omits it) the actual is
//     recorded as unavailable with the reason and the full reservation
//     stays charged: no guess is ever recorded as an actual.
//
// Anything the proxy cannot meter (an unknown path, an unpriced model, a
// body it cannot parse) is refused with a typed JSON error, never
// forwarded unmetered.
//
// # Errors
//
// ParseRequest returns ErrRequest; price lookups ErrUnpriced; clients see
// {"ok":false,"error_class":...,"retryable":...,"message":...}.
package meter
