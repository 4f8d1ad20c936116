// Package approval owns the human-approval (HITL) queue: a call the check
// pipeline escalated waits here until a person approves or denies it, or
// until its deadline passes (a timeout denies).
//
// The queue is a directory of JSON files, one per request, written
// atomically (temp file, fsync, rename) under an flock, so another process
// (klock approvals / approve / deny) can act on it and nothing is lost when
// the gateway crashes: a restarted gateway finds the request and its
// decision where it left them.
//
// Queue is what the queue's users (the gateway, the Token Guard's
// CostApprover, klock approvals / approve / deny) need; Store implements
// it for one host, and the sibling package etcdqueue for a fleet (its
// etcd, shared by every host), with the same semantics.
//
// Error semantics: ErrNotFound for an unknown id, ErrDecided when a request
// was already decided (or expired), ErrStore wrapping any I/O failure, and
// ErrUnreachable (an ErrStore) when a fleet's queue did not answer:
// nothing was filed or decided, and the caller refuses the call that
// needed approval, never lets it through. Wait never blocks past its
// bound: it returns the state it saw.
package approval
