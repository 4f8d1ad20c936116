// Package etcdqueue is the human-approval queue of a fleet: the same
// queue as approval.Store (pending, approved, denied, expired by
// deadline), kept in the fleet's etcd so that klock approvals, approve
// and deny on any host see and decide a call waiting on any other host.
// OpenHost picks the queue a klock process of this host uses: this one
// when the fleet marker (fleet.ReadMarker) says the host is in a fleet,
// the state directory's otherwise.
//
// # Key layout
//
// Under the fleet's prefix P (default /klock):
//
//	P/approval/<id>   one request (JSON approval.Request; host = the fleet host whose gateway filed it)
//
// A pending request has no etcd lease: it stays until it is decided or
// its deadline passes, whatever happens to the gateway that filed it (a
// restarted gateway's retry of the same call finds it by fingerprint).
// Once closed (denied, expired, approved and used, or approved and kept
// for its call) a request is written bound to an etcd lease of Retain
// (default a day) plus at most an hour, so the decided ones shown by
// klock approvals --all do not pile up in etcd.
//
// # Exactly one decision
//
// Every change of a request (a decision, an expiry, the mark that its
// approved call was used) is ONE transaction guarded by the mod revision
// its read saw: If(mod_revision(P/approval/<id>) = M) Then(put). Of two
// hosts deciding at once, etcd commits one; the other's guard fails, it
// reads the request again, finds it decided and returns
// approval.ErrDecided. A deadline passing is judged on the reading
// host's clock against the filing host's deadline (hosts of a fleet keep
// their clocks in sync), and an expiry commits behind the same guard, so
// a request is approved, denied or expired, never two of them.
//
// Submit reads the whole P/approval/ range at revision R, returns the
// open request of the same fingerprint if there is one, else files a new
// request with If(mod_revision(P/approval/...) < R+1): two gateways filing
// the same call at once file it once.
//
// # Waiting
//
// Wait watches the request's key from the revision it read: a decision
// made on another host wakes the waiting gateway through the watch, not
// by polling. It wakes at the deadline as well, to expire the request.
//
// # Errors
//
// approval.ErrNotFound for an unknown (or malformed) id and
// approval.ErrDecided for a request already decided, as the file store.
// Every failure to reach etcd wraps approval.ErrUnreachable (itself an
// approval.ErrStore) and names the endpoints: nothing was filed or
// decided, and a gateway refuses the call that needed approval (it never
// lets it through). Each operation gives up after its timeout (WithTimeout,
// default 5 s).
package etcdqueue
