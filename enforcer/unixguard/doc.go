// Package unixguard walls pathname AF_UNIX sockets for sessions whose file
// wall is Landlock, which cannot (its ABI 7 has no right for connecting to
// a socket file): cgroup BPF programs on the cgroup AF_UNIX address hooks
// (cgroup/connect_unix, cgroup/sendmsg_unix; Linux 6.7 and later) refuse a
// connect or a datagram to a socket path the session's rules do not grant
// CONSUMES on, before the kernel looks the name up.
//
// # What it owns
//
//   - bpf/unixguard.bpf.c and its bpf2go output here (unixguard_bpfel.go/.o,
//     committed; `go generate ./enforcer/unixguard`, or `make generate`).
//   - Two programs, loaded once per Guard and attached to every session
//     cgroup: connect_unix (connect() of stream, seqpacket and datagram
//     sockets) and sendmsg_unix (every datagram sent with an address:
//     sendto, sendmsg, and each message of sendmmsg).
//   - ug_sessions (cgroup id -> the session's rules id and loss count),
//     ug_rules (an LPM trie of the session's FILE rules, compiled by
//     lsm.CompileRules into the very entries bpf-lsm looks objects up in,
//     so both decide a path alike) and the ug_events ring buffer.
//
// # Guarantee
//
// For a process in a session cgroup (or below it), a connect or datagram to
// a pathname socket fails with EPERM before any listener hears of it unless
// the rules grant CONSUMES on the socket's path: the triple bpf-lsm and the
// tracepoints report for it (CONSUMES FILE:<path>). The path is the name
// the caller gave: absolute as is, relative joined to the caller's working
// directory (its kernel path). A name with an empty, "." or ".." component
// is refused whatever the rules say (lexically it is not the path the kernel
// reaches). A socket the agent bound itself is usable where its scope
// grants CONSUMES, as every file it may make there. Each refusal is
// reported on Session.Events (Source SourceCgroupUnix, Blocked, Errno
// EPERM, Syscall connect or sendmsg); nothing allowed is reported: the
// tracepoints report those in a Landlock session.
//
// # What it does not cover
//
//   - Symbolic links: the hooks run before the kernel resolves the name, so
//     a declared name that is a link to an undeclared socket goes through;
//     the tracepoints, which resolve it, detect it after the effect (strict
//     kills). Conversely an undeclared name that is a link to a declared
//     socket is refused (fail closed; the baseline declares both
//     /run/nscd/socket and /var/run/nscd/socket for that reason).
//   - A name that does not exist is refused too (EPERM instead of the
//     kernel's ENOENT), as bpf-lsm's socket_connect refuses it.
//   - Abstract names: not files; Landlock's scope (ABI 6) and the network
//     namespace wall them.
//   - Kernels before 6.7: Load fails (ErrLoad; detect.UnixHooks probes the
//     hooks for klock doctor); bpf-lsm
//     (unix_stream_connect, unix_may_send) covers them where it runs, and
//     otherwise pathname sockets are detected only (klock doctor and the
//     verification log say which).
//
// # Errors
//
// Load fails with ErrLoad, Attach with ErrAttach (nothing stays attached or
// written), a rule too long for a key with lsm.TooLongError inside
// ErrAttach. Refusals whose record was lost are counted on Session.Lost:
// strict mode must treat any loss as fatal.
package unixguard
