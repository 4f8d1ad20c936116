// Package dnsproxy is a session's name server: the one the agent's
// /etc/resolv.conf names, and the only one its network wall lets it reach.
// It answers a query only for a name the session declared in a NET intent
// (exactly, case-insensitive, a trailing dot ignored, or under a
// "*.example.com" wildcard) by forwarding it to the upstream resolvers it
// was given; every other name is answered REFUSED and never forwarded, so
// the agent cannot carry data out in the names it asks for
// (<data>.attacker.example) through any resolver.
//
// # What it owns
//
//   - One UDP and one TCP listener on the same address (Config.Addr, port 53
//     for a session), bound by Start before it returns: a query sent after
//     Start returned is served. Or the caller's own pair (Config.PacketConn
//     and Config.Listener: a session's, made in its network namespace).
//     Close stops both and waits for the queries in flight.
//   - The decision per query, in this order: a client Config.Client does
//     not accept is REFUSED, neither forwarded nor reported; a message that is not one
//     standard query (opcode QUERY, exactly one question, class IN) is
//     REFUSED; a name longer than 253 characters, or with a label that is
//     empty, longer than 63 characters or holds anything but letters, digits,
//     '-' and '_', is REFUSED; type ANY (and the zone transfers AXFR, IXFR)
//     is REFUSED; a name no declared pattern matches is REFUSED. Each of
//     these is reported through Config.OnRefused (name as asked, qtype,
//     client address, why), synchronously, before the REFUSED reply.
//   - Forwarding: the query as the client sent it, to each upstream in order
//     until one answers (UDP for a UDP client, retried over TCP when the
//     answer is truncated; TCP for a TCP client), with Config.Timeout per
//     try. No answer from any upstream: SERVFAIL.
//   - Answers: the A and AAAA records of a forwarded answer whose owner is
//     the name asked or a CNAME target reached from it in the answer
//     section are reported through Config.OnAnswer (the name asked, the
//     declared pattern it matched, the addresses, the smallest TTL of the
//     records on the way) before the reply is written, so a caller that
//     opens a wall to them has done so when the agent reads the answer.
//
// # Error semantics
//
// Start returns an error wrapping the listener's (errors.Is(err,
// syscall.EADDRINUSE) when the address is taken), nothing left bound. A
// non-nil error from OnAnswer (the caller could not open its wall to the
// addresses) turns the reply into SERVFAIL: the agent is never told an
// address it could not reach. Upstream failures are SERVFAIL replies, not
// errors of the proxy.
package dnsproxy
