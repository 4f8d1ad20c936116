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
// ErrClosed after Close; other errors wrap the failing setns or socket
// call. Add is idempotent: a listener already there is kept.
package looprelay
