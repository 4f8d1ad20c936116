// Package budget owns the money side of the cost path (seed 003): per-grant
// limits (max_cost_per_invocation, max_total_cost, max_invocations) checked
// atomically, the pre-charge / reconcile / reverse cycle, delegation that
// can only tighten, cross-currency charges through an integer rate table
// (a rates file, LoadRates: each rate with its source and time, recorded as
// oracle and exchange-rate evidence in the receipts), and the durable
// ledger those decisions move.
//
// The ledger is an embedded SQLite database (modernc.org/sqlite, pure Go, so
// klock still builds with CGO_ENABLED=0) in WAL mode, written only inside
// BEGIN IMMEDIATE transactions, keyed by (capability or session id, grant
// index). One process owns a ledger at a time (SQLite exclusive locking
// mode), which is what lets the Store keep the grants' counters and open
// holds in memory and decide against them.
//
// Every decision, allowed or denied, becomes a signed receipt (package
// receipt) chained in a JSONL file next to the ledger. The unsigned receipt
// is recorded with the ledger movement it records (table events), then
// signed and appended to the chain; after a crash Open appends whatever the
// chain is missing, so the chain always ends up holding exactly one receipt
// per ledger event and, for every grant without delegated children,
// sum(ledger_debit) - sum(ledger_credit) over its receipts equals its
// charged total.
//
// # Durability
//
// A caller is answered only after its decision is durable, and what makes
// it durable depends on the mode:
//
//   - One transaction per call (no WithGroupCommit): the decision is
//     committed to SQLite (synchronous=NORMAL) and the Store fdatasyncs the
//     WAL before answering, which is what synchronous=FULL adds to NORMAL.
//   - WithGroupCommit: concurrent decisions are decided together against
//     memory, each against the state left by the ones before it, so a
//     batch is exactly as strict as one transaction per call. The batch's
//     changes (grant counters, holds, receipt bodies) are appended as one
//     checksummed record to the decision journal, a file next to the ledger
//     (ledger path + ".decisions"), with one write and one fdatasync: that
//     fsync is the durable point, and the callers are answered when it
//     returns (journal.go, durable.go). SQLite gets the same changes
//     afterwards, up to 20 ms' worth per transaction, and its WAL is
//     synced before the journal space they took is reused (applier.go).
//     The applier also checkpoints the WAL into the database itself
//     (SQLite's automatic checkpoints are off), and writes the WAL and
//     the database out a piece at a time before each fsync (package
//     writeout), so that a journal fdatasync, which callers wait on,
//     queues behind one piece of the ledger's bulk writes, not a burst.
//     Open first puts into SQLite every journal record it lacks (in order,
//     up to the first torn or missing one: no record after that one was
//     ever answered), so SQLite is again the whole ledger, and starts a new
//     journal epoch so that records from before cannot be replayed later.
//
// Memory changes when a decision is made, before it is durable, so that
// the next is decided against it; nobody is told of a decision before it
// is durable. If a write or fsync of the WAL or of the journal fails, or
// SQLite cannot be written, what reached the disk is unknown: the callers
// waiting are refused with ErrLedger and the Store decides nothing more
// until it is reopened. A refused decision may then still be in the ledger
// with its receipt (money held for a call that did not run), never the
// reverse.
//
// The receipt chain is appended after the decision is durable and synced
// on Flush, on Close and every 200 ms, not per batch: it is derived from
// the ledger, which re-emits on Open any receipt a crash took from the
// chain. Receipts are signed in batches (one ed25519 signature over a
// Merkle root per up to 256 receipts, package receipt), and what a receipt
// links and is signed over (its leaf) does not depend on the batching, so
// a re-emitted receipt has the lost one's leaf byte for byte; only its
// proof and batch signature may differ.
//
// # Errors
//
// A refused charge returns a *DenyError (errors.Is ErrDenied) naming the
// limit, the attempted cost and what remains, together with its receipt.
// ErrUnknownGrant, ErrHoldNotOpen, ErrWiden (a delegation that would
// loosen a limit) and ErrGrantChanged are returned for bad requests. A
// pre-charge in a currency without a rate is refused (LimitCurrency, naming
// ErrNoRate); a reconcile never is for want of a rate: the hold settles at
// its reserved worst case, marked so in its receipt (ExtraSettledAt), so no
// hold stays open because a tool reported an unconvertible cost.
// When the ledger or the receipt log cannot be written, the decision is
// refused with ErrLedger, whose message says what failed and what would fix
// it: the Store never fails open, and after a receipt-log failure it refuses
// everything until it is reopened.
package budget
