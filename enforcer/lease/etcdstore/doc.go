// Package etcdstore is a lease.Store shared by the hosts of a fleet: every
// KLIS lease is a key in etcd, bound to an etcd lease whose TTL is the KLIS
// TTL, so a holder whose host stops renewing loses its leases cluster-wide.
//
// # Key layout
//
// Under the tenant prefix P (default /klock):
//
//	P/lease/<id>              one granted claim (JSON record), bound to the holder's etcd lease
//	P/age/<tenant>/<session>  created once per session: its create revision is the session's Wait-Die age
//
// # Why no two conflicting grants both commit
//
// Acquire reads the range P/lease/ at revision R (one range read), decides
// Wait-Die against it exactly as lease.Table does, and commits a grant as
// ONE transaction guarded by a revision fence:
//
//	If(mod_revision(P/lease/ .. P/lease0) < R+1)  Then(put each lease key)
//
// etcd evaluates the compare over every key of the range at commit time. A
// grant G2 that conflicts with a grant G1 committed after R writes a key of
// the range with a mod revision > R, so G2's compare fails and it decides
// again on a fresh read, where it sees G1. If G1 committed at or before R,
// G2's read saw G1 and the decision was not Granted. etcd serializes
// transactions, so of two conflicting grants the second to commit always
// fails one of the two cases. Deleting keys (release, expiry) only removes
// conflicts, so a stale view can only make a grant wait, never double it.
// The cost is one range read per attempt and a retry under write
// contention on the prefix; a per-path-component layout would bound reads
// by depth, and is left for when a fleet's lease count makes the range
// read matter.
//
// # Age
//
// A session's Wait-Die age is the etcd create revision of its age key: a
// cluster-wide total order, never a host clock. Decision.Age keeps the
// request's wall-clock age for callers; comparisons use revisions.
//
// # Fencing
//
// Every granted lease carries Fence, the revision of the transaction that
// granted it. FenceCmp returns an etcd compare that holds only while that
// grant is still in place (the key exists with that create revision): a
// gateway, a budget or a rollback writing to etcd adds it to its own Txn
// so that a holder whose lease was lost (expired, revoked) cannot act on
// it. CheckFence runs the compare alone.
//
// # Failure
//
// Losing etcd fails closed: no lease is granted without a committed
// transaction, and when a holder's keep-alive stops (etcd unreachable past
// the TTL, or the lease revoked) the store sends the holder on Lost(); the
// session kills (strict) or freezes (permissive) its agent.
//
// Errors: ErrNoEtcd wraps every failure to reach etcd; lease.ErrInvalid
// and lease.ErrGone keep their lease.Store meaning.
package etcdstore
