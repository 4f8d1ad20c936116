// Package lease is klock's KLIS lease manager: every intent a session (or
// a tool call, or an orchestrator through the KLIS-7 API) declares is a
// lease on the resource it names, granted when it conflicts with no lease
// another holder has (KLIS-2's matrix, policy.Conflicts), decided by
// Wait-Die when it does (KLIS-4), kept alive by heartbeats with a TTL
// (KLIS-3).
//
// # What a lease is on
//
// A lease is on what klock can observe a holder change and can roll back:
//
//   - FILE:<pattern> leases the files the pattern covers. Two patterns
//     overlap when one path is covered by both (Overlap): /repo/** and
//     /repo/src/a.go do, /repo/src/* and /repo/src/x/** do (at /repo/src/x),
//     /repo/a/** and /repo/b/** do not. Files under /dev, /proc and /sys are
//     not leased: they are kernel interfaces (a device everyone writes to,
//     such as /dev/null, or a per-process view, such as /proc/self), not
//     content a holder owns or klock can back up.
//   - PROC:<path> is never leased: running a program is not owning it. Two
//     sessions that both declare PROVIDES PROC:/usr/bin/sh each make a
//     process of their own; neither can change the program through that
//     intent (changing it is a FILE intent, and that one is leased).
//   - NET:<host|prefix>:<ports>[/proto] leases the endpoint: the same host
//     name (case-insensitive) or overlapping address prefixes, with
//     overlapping port ranges and compatible protocols. The matrix then
//     lets any number of holders connect (CONSUMES) while only one listens
//     (PROVIDES) on an endpoint. A host name and an address prefix overlap
//     only when the prefix is a whole address family (0.0.0.0/0, ::/0): a
//     name's addresses are not known until it is looked up.
//
// Same holder (tenant, agent and session) never conflicts with itself:
// leases are re-entrant.
//
// # Wait-Die
//
// A request is acquired whole (all of its claims or none). Its age is the
// time of its first attempt, kept across retries. Against each conflicting
// lease, an older requester (smaller age) WAITs and a younger or equally
// old one DIEs; the manifest's outcome is DIE if any claim dies, else WAIT
// if any waits, else GRANTED. Wait-Die cannot deadlock (only older waits
// for younger), and a requester that keeps its age becomes the oldest and
// is eventually granted.
//
// # Stores
//
// Store is the interface every lease manager implements; Table is the
// in-memory engine (klockd's and every store's core). A lease a holder
// stops heartbeating is held until ExpiresAt + Grace, then it is Expired
// and frees its resources.
//
// # Errors
//
// Outcomes are values (Decision), not errors: a DIE or a WAIT is an answer.
// Errors are for requests that cannot be decided (ErrInvalid: no holder, a
// claim on nothing) and for holders that no longer hold anything
// (ErrGone: heartbeats after expiry, release or revocation are refused).
package lease
