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
// Store is the interface every lease manager implements (a fleet's store
// on etcd is the next one). Two are here:
//
//   - Table, in memory: klockd's store, and the engine of the other. A
//     decision costs what the request names, not what the table holds:
//     FILE leases are in a path trie that counts, per node, the leases
//     below it by predicate (a subtree claim skips what holds nothing it
//     conflicts with), NET leases by host name and address, and leases
//     expire from a heap of deadlines, so that expiring costs what
//     expires. Check is a dry run of Acquire. It remembers the last
//     DefaultEndedHistory ended leases of each kind (Filter.EndedSince):
//     those that let their holder change files, which a strict rollback
//     reads, apart from the others, so that ended reads never push them
//     out.
//   - Host (OpenHost, DefaultHostDir /run/klock/leases): the host-wide
//     store that embedded sessions and klockd share, so that they see each
//     other. Its directory (0700, this user's) holds a lock file that is
//     never replaced and a journal of JSON lines. Every process keeps a
//     Table that mirrors the journal; an operation takes the lock (flock),
//     reads what others appended, decides with its mirror, appends what it
//     changed in one write, and lets go. Records carry absolute times, so
//     every process agrees when a lease expires, and the next operation of
//     anyone journals the expiry; a holder killed with SIGKILL keeps its
//     leases until ExpiresAt + Grace, as KLIS-3 says. Nothing is heard of
//     an operation (no event, no waiter woken) before the journal has it.
//     A line without its newline is a write its writer did not finish:
//     readers leave it, the next writer cuts it off. The journal is
//     compacted (a snapshot written beside it and renamed over it, under
//     the lock) when what was appended after its last snapshot outgrows
//     a quarter of it (WithCompactSize); a snapshot's history of ended
//     leases is decoded only once asked for; readers follow (the
//     replaced journal is made read-only: a process that has it open
//     learns so from the file, without looking its name up each time).
//
// A lease a holder stops heartbeating is held until ExpiresAt + Grace,
// then it is Expired and frees its resources.
//
// # Waiting
//
// Table and Host are Awaiters: Await blocks a WAIT until it is granted.
// Waiters are queued by age; when leases are freed, the store decides the
// queue oldest first, one grant after the other, and wakes only those it
// granted or that must now die (an older requester took what they wait
// for: Wait-Die lets nobody wait for an older holder). On the host store
// the queue is in the journal: whichever process frees a lease grants it
// to the oldest waiter of any process, and the waiting process hears of it
// through inotify. AcquireWait waits this way when the store is an
// Awaiter; it backs off only after a DIE.
//
// # Errors
//
// Outcomes are values (Decision), not errors: a DIE or a WAIT is an answer.
// Errors are for requests that cannot be decided (ErrInvalid: no holder, a
// claim on nothing, a FILE claim on a path that is not clean and
// absolute), for holders that no longer hold anything (ErrGone:
// heartbeats after expiry, release or revocation are refused), and for
// the host store: ErrCorrupt (a CorruptError says which line of which
// journal; the store refuses every operation until the journal is removed,
// which forgets its leases, when no session runs), ErrClosed, and the
// file system's errors (an operation that could not be journaled did not
// happen).
package lease
