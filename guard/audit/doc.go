// Package audit owns the gateway's audit log: every tool invocation, allowed
// or not, appended to a hash-chained JSONL file (internal/hashchain) with
// who, what, when, the arguments, the verdict, the result class and the
// duration. An allowed call gets two lines: "dispatch" before the tool runs
// (so an effect is never unrecorded, even across a crash) and "result"
// after. A refused call gets one "decision" line.
//
// Confidential mode (seed 004 §11) stores an HMAC-SHA256 per argument under
// the deployment's secret (audit.key, made on first use) instead of its
// value: never a plain SHA-256, which anyone could test guesses against.
// Outputs are never stored whole in any mode (seed 004 §13: no plaintext):
// only their hash and size, and the result values the contract's
// audit_logging.records names (their keyed digests when confidential).
// A "rollback" record is a contract's compensating call run for a killed
// session.
//
// # Durability
//
// A "dispatch" or "decision" record is on stable storage before Append
// returns, so a dispatch record is durable before the tool runs: an effect
// is never unrecorded, even across a power loss. A "result" record is in
// the file before Append returns (a crash of klock does not lose it) and is
// made durable by the next record's fsync, or by the chain writer at most
// hashchain.DeferredSyncDelay (2 ms) plus one fsync later. The result is
// thus returned to the agent while its record may still be in the page
// cache: only a machine crash in that window can lose it, and then the log
// ends with the call's durable dispatch record and no result, which reads
// as "dispatched, outcome unknown": the same record a crash while the tool
// runs leaves. This is what lets a call cost one fsync on the critical path
// instead of two. (The chain only ever loses a suffix: a record is never
// durable unless every record before it is.) If that deferred fsync fails,
// the chain refuses every later Append, so the next call is refused before
// dispatch. Concurrent Appends share fsyncs (group commit in hashchain).
//
// Error semantics: Open fails when the file cannot be created, written or
// verified (ErrUnwritable, or hashchain.ErrBroken for a tampered file);
// Append returns ErrUnwritable wrapped with the cause. The gateway treats
// both as "cannot guarantee the audit" and refuses the call or startup.
package audit
