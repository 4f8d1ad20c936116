// Package approval owns the human-approval (HITL) queue: a call the check
// pipeline escalated waits here until a person approves or denies it, or
// until its deadline passes (a timeout denies).
//
// The queue is a directory of JSON files, one per request, written
// atomically (temp file, fsync, rename) under an flock, so another process
// (klock approvals / approve / deny) can act on it and nothing is lost when
// the gateway crashes: a restarted gateway finds the request and its
// decision where it left them.
//
// Error semantics: ErrNotFound for an unknown id, ErrDecided when a request
// was already decided (or expired), ErrStore wrapping any I/O failure. Wait
// never blocks past its bound: it returns the state it saw.
package approval
