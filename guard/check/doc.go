// Package check owns the decision on one tool call before it reaches the
// world: the ordered, cheapest-first pipeline of Tool Trust Contract checks
// (seed 002) with seed 004's capability codes and category defaults.
//
// Order (every stage must pass; the first that fails decides):
//
//  1. declared   the tool is declared, holds capability tool.<name>.invoke,
//     and is not disabled by governance
//  2. category   seed 004's A–D defaults (timeout, rate) fill what the
//     contract leaves open
//  3. schema     arguments against input_schema (types, min/max, lengths,
//     pattern, enum; no undeclared argument), context bindings (must_match),
//     and type path arguments confined to within where they lead (path.go);
//     then (check "permission") seed 002's permission.scope and forbidden held against the
//     arguments and where their paths lead (permission.go; policy's
//     permission.go defines the entries): tool_restricted, reason
//     permission_scope or permission_forbidden
//  4. rate       token buckets per run, per minute/hour/day and per argument value;
//     governance may only narrow them (ErrWiden), and a State (WithState)
//     keeps the counters and governance across restarts
//  5. idempotency the call's idempotency key (the store lives in guard/idem);
//     a non-idempotent tool's repeat of a call that reached it in the run
//     escalates (retry.go; Dispatching settles racing repeats)
//  6. effect     side-effect class: an IRREVERSIBLE-WRITE never runs unsupervised,
//     nor, for the rest of a run, a REVERSIBLE-WRITE whose earlier call in
//     the run is past its rollback window (Irreversible)
//  7. autonomy   unsupervised / unsupervised_if (CEL), else escalate or deny;
//     HITL mode (declared, or forced by the lethal trifecta) escalates every
//     non-READ or externally communicating call (declared or inferred;
//     under the trifecta a READ of private data escalates too); a category D tool's first
//     call in a run escalates for governance (Governed records the approval)
//
// Stage 1 also refuses a category C tool without its extra capability
// tool.<name>.sensitive (capabilities.go: the manifest's grants grant and
// withhold codes) and a tool stopped for the run after
// max_consecutive_errors failures in a row (stopper.go: the gateway reports
// each dispatched call's Outcome). CheckOutput holds a tool's answer to its
// output_schema.
//
// Decide is logic over memory (no clock other than the injected one, safe
// for concurrent use) with one exception: a type path argument is resolved
// on the host's file system (lstat and readlink, nothing written), since
// where a path leads is not in its string. A denial is a *toolerr.Error (errors.Is its
// class's sentinel); an escalation names why a human must approve. A
// condition that cannot be evaluated never allows: it escalates (or denies
// when the contract says else: DENY).
//
// The Charger interface is the seam for budgets: check defines it,
// the gateway calls it, and a nil Charger means no budget is configured.
package check
