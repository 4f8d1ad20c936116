// Package fleetbudget shares a guard's grants (max_invocations,
// max_total_cost, in the grant's currency) across the hosts of a fleet
// through etcd. It decorates a host's own *budget.Store as a charge.Ledger:
// every call is still decided, receipted and made durable by the local
// store at its full speed; what the fleet adds is that a host may only
// spend what it took from the fleet grant in blocks.
//
// # What it owns
//
// One etcd key per grant, and in it one allocation per member (a host's
// ledger: cmd/klock names it host:receipts-dir). The local store, its
// receipts and its limits stay budget's; delegated grants are not shared
// (Define refuses them with budget.ErrBadRequest).
//
// # Key layout
//
// Under the fleet prefix P (enforcer/fleet.Config.Prefix, default /klock):
//
//	P/budget/<capability, path-escaped>/<grant index>
//
// holds JSON: the grant's limits (currency, max_total_cost,
// max_invocations) and, per member, "invocations" and "units" allocated
// to it (cumulative, not a remainder) and "used_invocations" and
// "used_units", its local ledger's counters when it last wrote the key.
//
// # Why the fleet never overspends
//
// Each member keeps in memory its allocation A (as last committed) and
// its usage U (a mirror of its ledger's counters: invocations, and charged
// with the open holds' worst cases). A Reserve is allowed locally only
// while U + the call fits in A, else the member takes a block: it reads
// the key at mod revision R, adds to its own allocation no more than
// limit - (sum of every member's allocation), and commits with one
// transaction If(mod_revision(key) == R) Then(put); a failed compare
// reads and decides again. Hence at every revision sum(A) <= limit, and
// every member's U <= its A, so the fleet's usage is within the limit.
// A member's view of A moves up only after its transaction is known to
// have committed, and down (a block returned, on Close or after
// WithIdle without calls) before it is sent, so an unanswered transaction
// can only leave etcd believing the member holds more than it spends:
// the fleet may strand that much until the member's next write, never
// overspend. A member also takes its allocation from etcd only through a
// successful compare-and-put, which fails any older transaction of its
// own still in flight.
//
// Blocks shrink as the grant runs out: a take is at most the remainder
// divided by twice the members the key names (and at most WithBlock
// invocations' worth), never less than the call needs, so a nearly
// exhausted grant is spread in ever smaller blocks instead of stranded
// in one host's.
//
// A member that crashes resumes its own block: its allocation is in etcd
// and its usage is its ledger's (budget replays its journal on Open), so
// New + Define carry on from there; nothing taken is lost, nothing spent
// is forgotten. Overruns that a tool reports after the call (Reconcile of
// more than was reserved) are charged as one host's ledger charges them,
// and raise the member's allocation on its next write: the fleet records
// them rather than hiding them.
//
// # Errors
//
// A call the fleet grant cannot cover is refused with a *budget.DenyError
// (errors.Is budget.ErrDenied) naming the limit and "fleet", with a
// signed deny receipt in the local chain. A call that needs a block while
// etcd does not answer (within WithTimeout) is refused with an error
// wrapping ErrUnavailable and budget.ErrLedger (the gateway reports it as
// tool_internal_error, reason ledger) that says why and what fixes it:
// calls the local block covers still run. Define returns ErrGrantChanged
// (wrapping budget.ErrGrantChanged) when another member defined the grant
// with other limits. Compare returns ErrMismatch when receipt chains do
// not add up to the fleet's ledger.
package fleetbudget
