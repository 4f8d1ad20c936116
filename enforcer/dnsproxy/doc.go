// Package dnsproxy is a session's name server: the one the agent's
// /etc/resolv.conf names, and the only one its network wall lets it reach.
// It answers a query only for a name the session declared in a NET intent
// (exactly, case-insensitive, a trailing dot ignored, or under a
// "*.example.com" wildcard), by asking the upstream resolvers it was given
// a question of its own; every other name is answered REFUSED and never
// forwarded, so the agent cannot carry data out in the names it asks for
// (<data>.attacker.example) through any resolver, and nothing but a
// declared name's lower-case form leaves in a query.
//
// # What it owns
//
//   - One UDP and one TCP listener on the same address (Config.Addr, port 53
//     for a session), bound by Start before it returns: a query sent after
//     Start returned is served. Or the caller's own pair (Config.PacketConn
//     and Config.Listener: a session's, made in its network namespace).
//     Close stops both and waits for the queries in flight. A UDP query is
//     read whole up to 65535 bytes.
//   - The decision per query, in this order: a client Config.Client does
//     not accept is REFUSED, neither forwarded nor reported; a message that is not one
//     standard query (opcode QUERY, exactly one question, class IN) is
//     REFUSED; an EDNS version other than 0 is BADVERS (RFC 6891); a name
//     longer than 253 characters, or with a label that is
//     empty, longer than 63 characters or holds anything but letters, digits,
//     '-' and '_', is REFUSED; type ANY (and the zone transfers AXFR, IXFR)
//     is REFUSED; a name no declared pattern matches is REFUSED. Each of
//     these is reported through Config.OnRefused (name as asked, qtype,
//     client address, the transport it came on, why), synchronously,
//     before the REFUSED reply.
//   - The question asked upstream is the proxy's own, never the client's
//     message: a fresh random id (RFC 5452), the name in lower case (RFC
//     4343: the case is no part of the question, and 0x20 bits would be a
//     channel), one question of the type asked and class IN, RD as asked,
//     and the proxy's EDNS0 OPT record (RFC 6891) advertising 1232 bytes,
//     without options and with DO clear (the proxy neither validates nor
//     passes DNSSEC). The client's EDNS options (cookies, padding, any
//     other), additional and authority records never leave.
//   - Forwarding: to each upstream in order over UDP, again over TCP when
//     the answer is truncated (RFC 7766), with Config.Timeout per try,
//     until one answers the question asked with NOERROR or NXDOMAIN;
//     another rcode, an answer to another question or no answer moves on
//     to the next. None left: SERVFAIL.
//   - The reply is rebuilt: the client's id and question exactly as it
//     asked (letter case included, for clients that check 0x20 bits), the
//     upstream's rcode (NOERROR or NXDOMAIN), RA set, and of the answer
//     section only the records of the question's chain: owned by the name
//     asked or a CNAME target reached from it, of the type asked or CNAME,
//     each TTL capped at MaxTTL (5 minutes: the wall stays open to an
//     answer's addresses for its TTL, and an upstream's day-long TTL would
//     keep it open a day after one lookup). Nothing of the upstream's
//     authority or additional sections: a stub resolver needs no referral
//     nor glue, and a negative answer without its SOA is simply not cached
//     (RFC 2308 section 5). A client that sent an OPT record gets the
//     proxy's. Over UDP the reply fits the size the client advertised (512
//     bytes without EDNS), TC set when records had to go, so the client
//     asks again over TCP; over TCP it carries up to 65535 bytes.
//   - No rebinding: each A and AAAA address of the chain goes through
//     Classify. An address that is not public unicast (unspecified,
//     loopback, link-local, multicast, RFC 1918, RFC 4193 ULA, RFC 6598
//     100.64/10, RFC 2544 198.18/15, 0/8, 240/4, site-local, the cloud
//     metadata addresses 169.254.169.254 and fd00:ec2::254, NAT64
//     (64:ff9b::/96) and 6to4 (2002::/16) of any of these, the local-use
//     NAT64 prefix 64:ff9b:1::/48 (RFC 8215), this host's interfaces' addresses at the time of the answer
//     and Config.Local's, the session's veth pair) is withheld from the
//     reply and reported through Config.OnRebinding (name, pattern,
//     address, why, client, transport), unless one of Config.Declared
//     (the manifest's address intents) holds it. A reply left without an
//     address is NOERROR with no address (NODATA, RFC 2308 section 2.2),
//     not NXDOMAIN: the name exists, and NXDOMAIN would deny every name
//     under it (RFC 8020) and the other address family's answer.
//   - Answers: the addresses left are reported through Config.OnAnswer
//     (the name asked, the declared pattern it matched, the addresses, the
//     smallest TTL of the records on the way, capped) before the reply is
//     written, so a caller that opens a wall to them has done so when the
//     agent reads the answer.
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
