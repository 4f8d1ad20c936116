// Package ratestate keeps a gateway's rate-limit counters and governance
// (disabled tools, narrowed limits) in an embedded SQLite database
// (modernc.org/sqlite, as guard/budget's ledger), so a restart forgets
// neither: a per_day: 1 tool used today stays used, a tool an operator
// disabled stays disabled, a non-idempotent call that reached its tool is
// still known, so its repeat in the run still waits for a human. It
// implements check.State and check.DispatchState.
//
// One gateway process owns the database (exclusive locking, WAL). Every
// allowed call's counters are written before the call is dispatched,
// without a flush: the gateway's audit record of the dispatch carries
// the same counters and is flushed before the call is sent, and a
// restarted gateway merges every such record back into this store
// (check.Pipeline.Merge), so a crash never hands back a call already
// dispatched. Sync flushes the write-ahead log at once; a governance
// change is durable before SaveGovernance returns.
//
// Error semantics: Open fails with ErrOpen naming the file and what to do;
// a failed write is returned to the pipeline, which refuses the call.
package ratestate
