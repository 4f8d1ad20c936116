// Package vlog owns klock's verification log (KLIS-6 §4): the record of one
// session written at its end to <dir>/verification.json (schema
// "klock.verification/v1"), read back by `klock log`, and rendered as the
// human summary a security engineer reads first (headline verdict, then
// the KLIS leases held and how long the session waited for them,
// violations, rollback (paths left to another session's lease with
// whose it was), amendments, intents with use counts,
// under-utilization, observed triples, lost events, exit status).
//
// A Log is built from the decision engine's records (Build with
// decide.Records) or filled directly; the caller supplies what only it
// knows: session and agent ids, the manifest path and hash, the backends
// and what each guaranteed, rollback actions and the exit status.
//
// The file is JSON with one top-level field a line and each element of a
// list (observed triples, violations, rollback actions) compact on a line
// of its own, streamed to disk element by element (encode.go): a session
// that touched 40k files has a 12 MB log, and the operator waits for it.
//
// Render shows every string of the log printable (Printable: control,
// format and invalid bytes as Go escapes), since most of them are named by
// the agent and a terminal would obey the escape sequences a file name can
// hold; the file keeps the exact bytes.
//
// It never decides, kills, rolls back or watches anything; it does no I/O
// except in Write and Read.
//
// Error semantics: Write returns the failing step wrapped (%w) and leaves
// no partial verification.json behind (temp file + fsync + rename + fsync
// of the directory). Read returns ErrSchema (errors.Is) for a file of
// another schema and wraps I/O and JSON errors. Render returns the
// writer's error.
package vlog
