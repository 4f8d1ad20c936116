// Package audit owns the gateway's audit log: every tool invocation, allowed
// or not, appended to a hash-chained JSONL file (internal/hashchain) with
// who, what, when, the arguments, the verdict, the result class and the
// duration. An allowed call gets two lines: "dispatch" before the tool runs
// (so an effect is never unrecorded, even across a crash) and "result"
// after. A refused call gets one "decision" line.
//
// Confidential mode (seed 004 §11) stores a SHA-256 per argument instead of
// its value. Outputs are never stored in any mode (seed 004 §13: no
// plaintext): only their hash and size.
//
// Error semantics: Open fails when the file cannot be created, written or
// verified (ErrUnwritable, or hashchain.ErrBroken for a tampered file);
// Append returns ErrUnwritable wrapped with the cause. The gateway treats
// both as "cannot guarantee the audit" and refuses the call or startup.
package audit
