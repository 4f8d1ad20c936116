// Package netguard is klock's per-session network wall (the cgroup-net
// backend): cgroup BPF programs that decide every connect, UDP send, bind and
// socket creation of a session's processes from the session's NET intents.
//
// # What it owns
//
//   - bpf/netguard.bpf.c and its bpf2go output here (netguard_bpfel.go/.o,
//     committed; `go generate ./enforcer/netguard` rebuilds them and needs
//     clang and bpf/include/vmlinux.h from scripts/gen-vmlinux.sh).
//   - Seven programs, loaded once per Guard and attached to every session
//     cgroup: cgroup/connect4, connect6 (connect, also on UDP sockets, and
//     TCP Fast Open's sendto), sendmsg4, sendmsg6 (UDP sendto/sendmsg with an
//     address), bind4, bind6 (PROVIDES NET) and sock_create.
//   - Two hash maps keyed by cgroup id: ng_policies (the session's rules, at
//     most MaxRules after host names are resolved and identical rules merged,
//     scanned in a bounded loop; at most MaxSessions sessions per Guard) and
//     ng_lost (events the ring buffer could not take), plus the ng_events
//     ring buffer.
//
// # Guarantee
//
// For a process in a session cgroup, or in any cgroup below it, an operation
// no rule allows fails with EPERM before it has any effect: no SYN, no
// datagram, no bound port, no socket. Rules match as policy.Ruleset.Allows
// does: address prefix, inclusive port range, protocol (tcp also covers
// MPTCP, udp also covers UDP-Lite), CONSUMES for connect/send and PROVIDES
// for bind. An IPv4-mapped IPv6 destination (::ffff:a.b.c.d) is judged by the
// IPv4 rules, and an IPv6 rule never matches an IPv4 destination. Loopback is
// not implicitly allowed; neither is a wildcard bind (0.0.0.0 or [::] must be
// declared as such). sock_create refuses, unless NET:raw is declared, every
// AF_INET/AF_INET6 socket that is not a TCP/MPTCP stream or UDP/UDP-Lite
// datagram socket: raw sockets, ICMP "ping" sockets (their sendto passes no
// cgroup hook), SCTP and other transports. Each denial is reported on
// Session.Events as an event.Event with Source SourceCgroupNet, Blocked,
// Errno EPERM, the denied triple (CONSUMES/PROVIDES NET:addr:port/proto, an
// IPv4-mapped address reported as IPv4, or CONSUMES NET:raw), pid, tid and
// comm. A process whose cgroup and ancestors have no rules while the
// programs run for its socket is denied too (fail closed).
//
// # Error semantics
//
// Load fails with ErrLoad, Attach with ErrAttach (nothing stays attached or
// written on any Attach error). A ruleset with a host name that
// policy.Ruleset.Resolve has not resolved is refused with *UnresolvedError
// (ErrUnresolved): the wall never fails open. More than MaxRules rules is
// *TooManyRulesError (ErrTooManyRules), naming the limit and the intent that
// overflowed. Events that could not be delivered (kernel ring buffer full, or
// the consumer more than EventBuffer behind) are counted on Session.Lost; the
// operation was still denied, only its record is missing, and strict mode
// must treat any loss as fatal. Probe does a real load and attach on a
// scratch cgroup and caches its answer, for `klock doctor`.
//
// # What it does not cover
//
//   - AF_PACKET: the kernel runs cgroup/sock_create only from inet_create and
//     inet6_create, so packet sockets never reach it
//     (TestPacketSocketNotSeenByCgroupHook pins this). The session's wall for
//     them is the dropped CAP_NET_RAW plus the launcher's seccomp filter
//     (deny socket(AF_PACKET, ...)); the integrator must install both.
//   - listen() on a socket that was never bound: the kernel autobinds an
//     ephemeral port without any bind hook, so such a listener is not
//     refused (TestEscapes pins it). The tracepoint observer must report
//     listen() so the decision side sees PROVIDES NET on that port.
//   - Inbound traffic: packets to a socket the session bound legitimately,
//     or replies to a declared destination, are not filtered.
//   - Sockets that did not come from the session: a socket created outside
//     the session cgroup and passed in by fd is decided by its creator's
//     cgroup (the agent has no such fd unless the launcher leaks one). A
//     session's socket used by a process outside every session is denied.
//   - Unix sockets: a pathname socket is a FILE object, decided by
//     bpf-lsm, or with a Landlock wall by enforcer/unixguard (the cgroup
//     AF_UNIX hooks); abstract names by Landlock's scope and the network
//     namespace. Netlink, vsock and other non-inet families.
//   - The names behind addresses: host names are resolved at session start
//     (policy.Ruleset.Resolve); a name whose addresses change later needs
//     Session.Update with the new addresses (enforcer/session does it from
//     its DNS proxy's answers, policy.Ruleset.WithHostAddrs). A "*."
//     wildcard host, and a host name a permissive lease added, have no
//     rule until then (walled in, never open).
//
// It never decides to kill, never resolves names, and never reads files.
package netguard
