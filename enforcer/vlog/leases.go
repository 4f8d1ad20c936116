package vlog

import "time"

// HeldLease is one KLIS lease the session held (enforcer/lease): one per
// intent of its ruleset that leases something, taken before the pre-flight
// backup and released after this log is written.
type HeldLease struct {
	ID string `json:"id"`
	// Lease is the predicate and the leased resource, "MUTATES
	// FILE:/srv/repo/src/**".
	Lease string `json:"lease"`
	// Baseline: taken for one of the baseline's intents (the system files
	// every program reads), not one the manifest declares.
	Baseline bool      `json:"baseline,omitempty"`
	Acquired time.Time `json:"acquired"`
	// End is how the lease ended when that was before the session did:
	// "Revoked" (klock kill, klock leases revoke, the lease API) or
	// "Expired" (no heartbeat for its TTL and grace). Empty: held to the
	// session's end, then released.
	End string `json:"end,omitempty"`
}

// LeaseWait says how the session came by its leases when it did not at
// its first attempt (klock run --wait): another session held a
// conflicting one.
type LeaseWait struct {
	// WaitedMS is how long it waited, in milliseconds.
	WaitedMS int64 `json:"waited_ms"`
	// Attempts counts the acquisitions tried, the last (granted) included;
	// Waits the WAIT answers (this session was the older: it waits),
	// Deaths the DIE answers (the younger: it backs off and retries, with
	// its age kept). KLIS-4 Wait-Die.
	Attempts int `json:"attempts"`
	Waits    int `json:"waits"`
	Deaths   int `json:"deaths"`
	// Behind are the leases it waited for, each once.
	Behind []LeaseHolder `json:"behind"`
}

// LeaseHolder is a lease another session held, and whose it was.
type LeaseHolder struct {
	Session string `json:"session"`
	Agent   string `json:"agent"`
	Lease   string `json:"lease"`
	// Intent is this session's own intent that conflicted with it.
	Intent string `json:"intent,omitempty"`
}

// Waited is LeaseWait.WaitedMS as a duration.
func (w *LeaseWait) Waited() time.Duration { return time.Duration(w.WaitedMS) * time.Millisecond }

// LeaseStall is a time the session's leases could not be renewed: a
// fleet's store (etcd) did not answer. A permissive session's agent is
// frozen meanwhile (its cgroup), since another host may be granted what it
// changes once the leases run out; a strict one runs on until they do,
// then is killed and rolled back.
type LeaseStall struct {
	From time.Time `json:"from"`
	// To is when it ended: renewed, lost, or the session ended.
	To time.Time `json:"to"`
	// Why is the store's error when the stall began.
	Why    string `json:"why"`
	Frozen bool   `json:"frozen,omitempty"`
	// Outcome is "renewed" (the store answered again in time), "lost"
	// (the leases ran out: the session ended) or "ended" (the session
	// ended first).
	Outcome string `json:"outcome"`
}

// Length is how long the stall lasted.
func (s *LeaseStall) Length() time.Duration { return s.To.Sub(s.From) }
