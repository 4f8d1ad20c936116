// Package budget owns the money side of the cost path (seed 003): per-grant
// limits (max_cost_per_invocation, max_total_cost, max_invocations) checked
// atomically, the pre-charge / reconcile / reverse cycle, delegation that
// can only tighten, cross-currency charges through an integer rate table,
// and the durable ledger those decisions move.
//
// The ledger is an embedded SQLite database (modernc.org/sqlite, pure Go, so
// klock still builds with CGO_ENABLED=0) in WAL mode, written only inside
// BEGIN IMMEDIATE transactions, keyed by (capability or
// session id, grant index). One process owns a ledger at a time (SQLite
// exclusive locking mode), which is what lets the Store keep the grants'
// counters in memory: memory is changed only after the transaction that
// records the change has committed.
//
// Every decision, allowed or denied, becomes a signed receipt (package
// receipt) chained in a JSONL file next to the ledger. The unsigned receipt
// is written in the same transaction as the ledger movement it records
// (table events), then signed and appended to the chain; after a crash Open
// appends whatever the chain is missing, so the chain always ends up holding
// exactly one receipt per ledger event and, for every grant without
// delegated children, sum(ledger_debit) - sum(ledger_credit) over its
// receipts equals its charged total.
//
// A caller is answered only after its decision is durable in the ledger:
// the Store runs SQLite with synchronous=NORMAL and fsyncs the WAL itself
// after the commit and before answering, which is the one thing FULL adds
// to NORMAL, done so that the fsync of one batch overlaps the deciding and
// committing of the next (durable.go). With WithGroupCommit, concurrent
// decisions share one transaction and fsyncs are shared across the
// batches committed while one runs; each decision is still checked against
// the state left by the ones before it, so a batch is exactly as strict as
// one transaction per call. If an fsync fails, its callers are refused and
// the Store decides nothing more until it is reopened.
//
// The receipt chain is appended after the ledger fsync and synced on
// Flush, on Close and every 200 ms, not per batch: it is derived from the
// ledger, which re-emits on Open any receipt a crash took from the chain,
// byte for byte (ed25519 signatures are deterministic).
//
// # Errors
//
// A refused charge returns a *DenyError (errors.Is ErrDenied) naming the
// limit, the attempted cost and what remains, together with its receipt.
// ErrUnknownGrant, ErrHoldNotOpen, ErrNoRate, ErrWiden (a delegation that
// would loosen a limit) and ErrGrantChanged are returned for bad requests.
// When the ledger or the receipt log cannot be written, the decision is
// refused with ErrLedger, whose message says what failed and what would fix
// it: the Store never fails open, and after a receipt-log failure it refuses
// everything until it is reopened.
package budget
