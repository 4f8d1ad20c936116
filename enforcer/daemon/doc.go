// Package daemon is klockd, the daemon that keeps klock's BPF programs
// loaded and runs sessions for clients, and its client (used by klock run,
// klock ps, klock kill and klock events).
//
// # What it owns
//
//   - One observe.Observer and one netguard.Guard for the daemon's lifetime
//     (session.Shared): each session watches / attaches its own cgroup, so a
//     session costs no BPF load. Every session runs through session.Run,
//     the same code path as the embedded `klock run`, with
//     Options.Backends set.
//   - The unix socket (DefaultSocket, /run/klock/klockd.sock): its directory
//     is created 0750 root:klock when missing (an existing directory is left
//     as it is), the socket is 0660 root:klock (root:root when the group
//     does not exist). Or a socket already listening (Config.Listener:
//     klockd under systemd socket activation), whose mode, group and file
//     are its maker's: Shutdown closes it and leaves the file.
//   - The registry of running sessions (ps) and their cancellation (kill,
//     client disconnect, shutdown).
//   - The host's lease store (Config.Leases; an in-memory lease.Table
//     when none is given, closed at Shutdown), which cmd/klockd also
//     serves as the KLIS-7 lease API on a socket of its own
//     (enforcer/leaseapi). Both sockets are made, and their peers
//     identified, by the same code (enforcer/usock).
//   - Telling Config.Observer (klockd --metrics-listen: enforcer/metrics)
//     of each session it runs, klock run's and the containers it adopts
//     (KindRun, KindContainer): admitted, agent running, what session.Run
//     returned. The observer only reads; it never changes a session.
//   - The event hub (Config.Events, enforcer/eventlog): every session's
//     records (container sessions' too) and the lease store's decisions
//     (the store is wrapped by eventlog.Leases), served to klock events
//     and written to Config.EventsFile (klockd --events-file). A reader
//     never slows a session: one that falls behind loses records and is
//     told how many.
//
// # Who may use it
//
// Every connection is checked before its request is read, from what the
// kernel says about the peer, never from what it claims:
//
//   - SO_PEERCRED (uid, gid, pid at connect time) and SO_PEERGROUPS (its
//     supplementary groups): only uid 0 or a member of the klock group
//     (Config.Group) gets any answer; anyone else gets an ErrForbidden
//     error and is logged.
//   - The peer's cgroup: /proc/<pid>/cgroup of the peer (pinned by the
//     SO_PEERPIDFD pidfd, or pidfd_open on kernels before 6.5; the pidfd
//     must still be alive after the read, so a reused pid cannot pass) must
//     not be klock's session parent (<cgroup2 mount>/klock) or below it. An
//     agent can never reach klockd anyway: it runs in its own mount
//     namespace behind Landlock, which grants no connect to the socket path
//     unless a manifest declares it; this check is the second wall, for an
//     agent run as uid 0 or under a manifest that declares the path. A peer
//     whose cgroup cannot be read or verified, or lies outside klockd's
//     cgroup namespace ("/.."), is refused (fail closed).
//   - Root may run agents as any uid (uid 0 only with AllowRoot, as in the
//     embedded path). A klock-group member that is not root may run agents
//     only as itself and its own groups, in a workdir and log directory it
//     owns (klockd writes klock's state there as root), and may list and
//     kill only its own sessions.
//
// # Protocol (version 1)
//
// One request per connection. Every message is a frame: a 4-byte
// big-endian length, then that many bytes of one JSON object whose "type"
// says what it is (see message). The client speaks first:
//
//	{"type":"run","v":1,"run":{RunRequest}}  + SCM_RIGHTS: the client's stdio
//	{"type":"ps","v":1}
//	{"type":"kill","v":1,"id":"SESSION"}
//	{"type":"events","v":1,"events":{EventsRequest}}
//
// The run request's frame carries the client's stdin, stdout and stderr as
// SCM_RIGHTS ("stdio" says which): the agent gets those very descriptors,
// so it writes straight to the user's terminal, exactly as in the embedded
// path; nothing of the agent's output passes through klockd. klockd answers
// a run with {"type":"started","session":{...}}, then any number of
// {"type":"log","log":{time,level,msg,attrs}} (the session's progress and
// warnings, forwarded without ever blocking the session: a slow client
// loses log lines, never events), then one {"type":"result","result":
// {WireResult}} (exit code or signal, killed, reason, violation, log path,
// the verification log, learned manifest bytes) or {"type":"error",
// "error":{"class","message"}}. While a run is in progress the client may
// send {"type":"cancel","reason":"..."} (klock run got SIGINT/SIGTERM); it
// still receives the result. A client that disconnects kills its session.
// ps is answered by {"type":"sessions","sessions":[SessionInfo...]}, kill
// by {"type":"killed","id":...}; every refusal is an "error" frame whose
// class (ClassForbidden, ClassDegraded, ...) maps to a sentinel error
// (errors.Is(err, ErrForbidden), errors.Is(err, session.ErrDegraded)); a
// events is answered by one {"type":"event","event":{eventlog.Record}}
// per record (the backlog since "since", then, with "follow", each new
// one until the client goes away), and {"type":"events_end"} when a
// stream without follow has sent the backlog; a peer that is not root
// gets the records of its own sessions and leases only (owner
// "uid:<its uid>"). A
// lease_conflict error also carries the lease manager's decision ("lease":
// WireLeaseConflict), which errors.As turns back into the embedded path's
// *session.LeaseConflictError.
//
// # Leases
//
// Every session takes its KLIS leases from Config.Leases, by default the
// host's store (session.HostLeases), which embedded klock runs share; the
// client's uid is their tenant. The run request's lease_wait (klock run
// --wait), lease_ttl and lease_grace are the session's.
//
// # Lifetime
//
// Shutdown (klockd on SIGTERM) stops accepting, kills every session (each
// ends as any killed session does: cgroup.kill, rollback, verification log,
// and its client gets the Killed result), waits for them, unloads the
// backends and removes the socket.
//
// # What it never does
//
// It never decides what an agent may do (session, decide and policy do),
// never relays the agent's output, and never serves a peer it could not
// identify. Sessions run embedded in `klock run` are not klockd's and do
// not appear in ps.
package daemon
