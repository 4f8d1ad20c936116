// Package etcdstore is a lease.Store shared by the hosts of a fleet: every
// KLIS lease is a key in etcd, bound to an etcd lease whose TTL is the KLIS
// TTL, so a holder whose host stops renewing loses its leases cluster-wide.
//
// # Key layout
//
// Under the tenant prefix P (default /klock):
//
//	P/lease/f<anchor>\x00<id>  a FILE lease (JSON record), bound to its holder's etcd lease;
//	                           anchor is the path its pattern is rooted at (/repo/src for /repo/src/**)
//	P/lease/n\x00<id>          a NET lease
//	P/age/<tenant>/<session>/<agent>  its create revision is the session's Wait-Die age
//
// Two FILE patterns overlap only when one's anchor is an ancestor of, or
// equal to, the other's (lease.PathOverlap: a pattern covers its anchor,
// its children or its subtree). So every lease that can conflict with a
// claim anchored at A lies under one of the claim's conflict ranges: the
// exact prefix P/lease/f<X>\x00 of A and of each of its ancestors X, and
// the prefix P/lease/f<A>/ of everything below A (a NUL never occurs in a
// path, so these prefixes hold exactly those anchors). A claim on a path
// of depth d reads d+2 ranges, however many leases the fleet holds in
// other parts of the tree; NET claims read the one NET range.
// TestConflictRangesCoverEveryOverlap checks the covering.
//
// # Why no two conflicting grants both commit
//
// Acquire reads the request's conflict ranges and its age key at one
// revision R (one read-only transaction), decides Wait-Die against them
// exactly as lease.Table does, and commits a grant as ONE transaction
// guarded by a revision fence on the same ranges:
//
//	If(mod_revision(range_i) < R+1 for every conflict range) Then(put each lease key)
//
// etcd evaluates each compare over every key of its range at commit time.
// Let G1 and G2 be conflicting grants. G1's key lies under one of G2's
// conflict ranges (and G2's under one of G1's: overlap is symmetric). If
// G1 committed after G2's read at R, G1's key has a mod revision > R and
// G2's compare fails, so G2 decides again on a fresh read, where it sees
// G1. If G1 committed at or before R, G2's read saw G1 and the decision
// was not Granted. etcd serializes transactions, so of two conflicting
// grants the second to commit always fails one of the two cases. Deleting
// keys (release, expiry) only removes conflicts, so a stale view can only
// make a grant wait, never double it. Grants on disjoint parts of the tree
// touch none of each other's ranges and never retry because of each other.
//
// A holder's etcd lease is granted on its first grant and kept alive; when
// the holder releases everything, its keys (known to the store that put
// them) are deleted in one transaction without a read and the etcd lease
// goes to a pool for the next holder of the same TTL, so a steady grant
// and release costs one read and two writes, the shape of a bare fenced
// transaction (BenchmarkFleetGrantRelease).
//
// # Age
//
// A session's Wait-Die age is the etcd create revision of its age key: a
// cluster-wide total order, never a host clock. A first request has no
// age key yet; it is younger than every holder it read (their keys were
// made before their grants), and its key is put in its grant's
// transaction (guarded by "the age key does not exist"), or alone when
// it must wait or die, so that it keeps its age across retries. Decision.Age keeps the
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
