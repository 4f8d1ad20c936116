// Package looprelay lets an agent in a network namespace of its own reach
// the host's loopback services it declared. Inside the namespace,
// 127.0.0.0/8 and ::1 are the namespace's own loopback: a connect to
// 127.0.0.1:8080 never leaves it, and netwall drops the session's packets
// to the host's loopback whatever the peers. For each declared loopback
// address and port, a Relay listens inside the namespace on that address
// and port (its socket made there through setns, on a thread of its own)
// and forwards every connection (TCP) or datagram flow (UDP) to the same
// address and port on the host, from klock's own process.
//
// Why a relay and not DNAT: a DNAT to the host's loopback needs
// route_localnet on the veth and a rewrite in the session's namespace and
// in the host's, and must get past netwall's loopback drop; a relay
// changes nothing in the host's network configuration, needs no rule in
// the agent's namespace, works for IPv4 and IPv6 alike, and counts what it
// carries. What it costs: the service sees klock's process as its client
// (from the host's loopback, not the session's address), and a declared
// loopback peer is relayed only on the ports it names (a range of at most
// MaxPorts ports; a wider one is not relayed, and Add says so).
//
// # The handoff: no second hop (handoff.go)
//
// A session with a declared host loopback service and no egress budget
// launches its agent with connect(2) trapped (launch.Spec.TrapConnect:
// stage 2's seccomp filter returns SECCOMP_RET_USER_NOTIF for connect,
// after its arch check, which kills a foreign ABI, and its x32 check,
// which fails x32 calls with ENOSYS, so no ABI goes around it; the
// filter's listener reaches the session over a socket pair, SCM_RIGHTS,
// before the agent runs). HandOff answers every trapped connect. The
// destination is read once from the agent's memory (process_vm_readv),
// the agent's socket is opened through pidfd_getfd, and the notification
// is checked still valid (SECCOMP_IOCTL_NOTIF_ID_VALID: the pid was not
// recycled in between). A TCP connect of an unbound, unconnected socket
// of the agent's namespace to a service the relay listens for gets a
// socket klock makes in the host's namespace, of the same family, with
// the agent's socket options (copyOptions, as bypass4netns replays
// them), connected by klock to the copy it read (the agent's memory is
// never read again: no time-of-check/time-of-use window), locked to its
// peer by a socket filter (lockToPeer: were the agent ever to disconnect
// it, nothing but the service could answer it), and put in place of the
// agent's fd with SECCOMP_IOCTL_NOTIF_ADDFD and SECCOMP_ADDFD_FLAG_SETFD
// (Linux 5.9), keeping its close-on-exec and O_NONBLOCK. The connect
// returns 0, or EINPROGRESS for a non-blocking socket (the socket is
// writable at once, SO_ERROR 0). klock completes the handshake before
// the handoff (a loopback one takes microseconds; at most
// connectTimeout), so only a connected socket is ever handed over, and a
// refused connect fails with ECONNREFUSED at once. SECCOMP_ADDFD_FLAG_SEND
// (5.14) is not used: it makes the call return the new fd's number, and
// connect returns 0. Stage 2 asks for SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
// (5.19): once HandOff has read a call, only a fatal signal takes the
// agent's thread out of it. Before 5.19 any signal does; a signal before
// the fd was put in place makes klock's connect one for nothing (the
// service sees it closed), and one after it restarts the call, which gets
// the same answer (restarts; its examine waits for the answer under way
// on that thread and fd), not EISCONN.
//
// Every other connect continues (SECCOMP_USER_NOTIF_FLAG_CONTINUE): the
// kernel reads the sockaddr and the fd again, but what continues is a
// connect of the agent's own socket in its own namespace, which the
// walls decide on what the kernel uses (cgroup-net, Landlock, netwall);
// the relay never let anything through, it only did not take it. A
// connect on a socket of another namespace (one the relay handed over)
// never continues: EISCONN, as the kernel answers a connected socket,
// or EPERM for a disconnect (AF_UNSPEC). UDP, a socket the agent bound
// to a port first, and any connect when the kernel refused an addfd
// continue to the copying relay, which listens as before: it is the
// fallback, and what runs when seccomp's listener is unavailable
// (stage 2 then loads its filter without the trap).
//
// The bytes of a handed-over connection go through the kernel, not the
// relay: they are counted from the kernel's tcp_info for the socket,
// which sock_diag reports when the socket is destroyed (tcpinfo.go): out
// is bytes_sent less bytes_retrans, exact; in is bytes_received, which
// counts the service's FIN as one byte. WaitCounted waits for them after
// the agent exited. An egress budget cannot hold a flow the kernel
// carries, so a session with network.max_egress_bytes never traps
// connect: its relay copies, counts and holds every flow as below.
// Counts.Handed and Counts.Copied say which path each connection took
// (the log's "loopback relay (addfd)", "(copy)").
//
// Who reports a connect the relay answers (report.go): no wall's hook
// runs for it (cgroup-net's run inside connect(2), which the agent's
// thread never enters), but the syscall tracepoints still see the call
// and its answer, so a session under the Landlock wall needs nothing
// more. A session under bpf-lsm has no tracepoint: New's Report option
// has the relay tell the session of each connect it answers itself
// (handed over, failed with klock's own connect's errno, refused at the
// trap with EISCONN), as the event the walls would have reported, by
// the calling thread's process (the notification's pid), before the
// agent's call returns; Answering says whether an answer is under way.
//
// What the handoff changes for the agent: its socket is the host's (a
// getsockname shows the host's loopback port the service sees); a socket
// it registered with epoll before connecting is not the one in the set
// after (the epoll entry follows the replaced file; event loops register
// after connect, as Go, Python's asyncio, libuv and curl do); socket
// buffer sizes are copied only when set (a set size disables the
// kernel's autotuning); a process that shared the socket before the
// connect (a fork) keeps the agent's own.
//
// What is left to the socket filter: a continued call refetches its fd,
// so an agent thread that swaps a handed-over socket onto the fd of a
// connect the relay let continue (dup2 racing the kernel) can disconnect
// it (AF_UNSPEC) and reuse it in the host's namespace: listen, or
// connect elsewhere. lockToPeer makes that worthless but for the SYNs
// it sends: no answer but the service's reaches the socket, so no
// connection completes and no client gets in (TCP Fast Open's data in a
// SYN reaches a server that takes it without a handshake, with a cookie
// the host's namespace holds for it).
//
// Measured on this 2-vCPU VM under load 5-9 (docs/benchmarks.md):
// test/perf BenchmarkNetThroughput, 256 MiB to a host loopback service
// from a strict session against the same sender run directly, both paths
// in each run: handed over 0.61-0.92x, copied 0.31-0.56x (nine runs),
// and 0.90-1.23x of the floor (the direct sender while a session lives);
// BenchmarkHandOffThroughput, the handoff alone (child processes, no
// other wall): 0.92-1.32x direct, BenchmarkRelayThroughput's copy
// 0.58-0.80x.
//
// # The copying relay
//
// TCP is copied in klock's process (a 256 KiB buffer each way, every
// read counted). Two in-kernel alternatives were built and measured on
// 6.18 (against the throughput goal in docs/benchmarks.md) and left out: a sockmap splice (an
// sk_skb stream verdict redirecting each skb to the peer socket) was
// slower, as its redirects go through a per-socket kernel worker that
// waits a jiffy whenever the peer's send buffer is full, and it has no
// back-pressure: a service that reads nothing let the agent push 1 GiB
// into kernel memory in under two seconds (the copy holds it at about
// 14 MiB of socket buffers); splice(2) through a kernel pipe was slower
// too. TestSlowServiceHoldsTheAgent keeps the bound.
//
// Owns tells a host service that a client is one of the relay's flows
// (the namespace is the session's alone, so what comes through the relay
// is the agent's). The session's DNS proxy needs no relay: it listens in
// the namespace itself (enforcer/session).
//
// The egress budget: the relay's flows never cross the packet wall and
// its quota, so the relay holds its share itself (SetBudget, budget.go):
// past it nothing more goes out, the flow that reached it is held (the
// agent's send stalls, as under the wall's drop) and the session is told
// at once, to kill a strict session. Counters say what reached the
// service (Out*) apart from what the agent sent past the budget and the
// relay held (Over*); Settle waits until the relay has read what the
// agent queued before it exited, so they count all of it.
//
// The cgroup-net wall still decides every connect and send before the
// relay sees it: the relay only listens where a declared peer is.
//
// Errors: ErrTooWide from Add for a port range wider than MaxPorts;
// ErrClosed after Close (Add, HandOff); other errors wrap the failing
// setns or socket call. Add is idempotent: a listener already there is
// kept. A trapped connect is always answered: an error of the handoff
// path is the errno the agent's connect returns (one the kernel's
// connect could return), or the connect continues.
package looprelay
