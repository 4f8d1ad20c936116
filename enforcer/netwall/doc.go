// Package netwall owns a session's packet-level network wall: its own
// network namespace joined to the host by a veth pair, with NAT and one
// nftables table per session. It is the second wall behind cgroup-net
// (enforcer/netguard): the cgroup programs refuse undeclared connect,
// sendmsg and bind calls before their effect; netwall drops, in the host's
// netfilter, every packet the session sends that no declared peer covers,
// whatever socket call or protocol made it (ICMP, raw sockets, SCTP, a
// socket the cgroup hooks did not see).
//
// What Setup builds for a session id (short id: 12 hex digits of its
// SHA-256):
//   - a veth pair: "kl-<short id>" on the host (its alias "klock <id>"
//     names the session), "eth0" inside the agent's network namespace;
//   - a /30 from 10.203.0.0/16, allocated under a lock
//     (/run/klock/netwall.lock) without collision with the addresses of
//     existing kl-* links: .1 on the host side, .2 in the namespace, whose
//     default route goes through the host side; forwarding on for that
//     link, and net.ipv4.ip_forward turned on when off (replies arrive on
//     the host's uplink, whose forwarding the kernel checks, as Docker and
//     Podman do);
//   - IPv6 (ipv6.go), when the host has it: the /64 of Range6
//     (fd6b:6c6f:636b::/48) numbered as the /30 (the 4th group is the
//     slot), ::1 on the host side (accept_ra 0: the session never
//     configures the host), ::2 in the namespace with a default route
//     through it, both without duplicate address detection and waited for
//     until no longer tentative, each end's neighbor entry for the other
//     permanent (the host side ignores solicitations until its address
//     worker ran: the agent's first packets would wait a second);
//     net.ipv6.conf.all.forwarding turned on when off, links whose
//     accept_ra is 1 and that hold routes from router advertisements set
//     to 2 first (forwarding makes the kernel ignore advertisements
//     otherwise, and a host configured by SLAAC would lose its routes; no
//     other link, nor the default for new ones, is changed: a link
//     accepting them while the host forwards lets whoever is on it route
//     the host). A host with IPv6 disabled
//     (net.ipv6.conf.all or default.disable_ipv6 = 1) or without it gets
//     the IPv4 wall alone, IPv6 off on the host side: Wall.NoIPv6 (wrapping
//     ErrNoIPv6) says why and the fix, and IPv6 peers never match;
//   - the table "klock_<short id>" (inet family: one table for IPv4 and
//     IPv6, every rule below for both): masquerade of the session's
//     addresses on the way out (NAT66 for IPv6: a unique local address is
//     routed nowhere past the host); the session's packets, forwarded
//     or to the host's own addresses (input hook), go through a chain that
//     drops by default and accepts, per declared peer (address prefix,
//     port range, tcp/udp), the peer's packets, with one named counter per
//     peer and direction; peers named by host only (Peer.Prefix invalid)
//     are two sets, IPv4 and IPv6 addresses with timeouts, filled at run
//     time by Allow (the session's DNS proxy's A and AAAA answers) whose
//     entries expire; the host's loopback (127.0.0.0/8, ::1) and the cloud
//     metadata addresses (169.254.169.254 and fd00:ec2::254, unless
//     Config.AllowMetadata) are dropped before any peer, and so is a
//     packet whose source is not the session's address (forged with a raw
//     socket), and so is any protocol but IPv4 and IPv6 (but IPv4 when
//     the session has no IPv6); replies reach the session only on
//     connections it opened (conntrack established or related);
//   - IPv6's link control, before any wall: the session's neighbor
//     solicitations and advertisements, router solicitations and multicast
//     listener reports to the host side (input hook only: never
//     forwarded), the host's neighbor discovery and listener queries to
//     the session, and the host's own ICMPv6 errors (destination
//     unreachable, packet too big, time exceeded). IPv6 finds its gateway
//     by ICMPv6 where IPv4 uses ARP (which no inet table sees); and the
//     host reports "no route" for a peer before conntrack confirmed any
//     flow the error could be related to, so without it the agent's
//     connect would hang instead of failing with ENETUNREACH. Router
//     advertisements and redirects from the session are dropped; with Config.MaxEgressBytes a named quota is consumed by
//     every accepted packet out of the session, and once spent the kernel
//     drops the rest (Exceeded reports it, for a strict session's kill):
//     a peer's packet past it is counted apart (Counts.Over*, and in
//     Dropped), so the counters say what was delivered (Out*) and what
//     was sent (Out* + Over*: Spent) however fast the session ended;
//   - with Config.PingPeer (NET:raw declared) the session's ICMP (and
//     ICMPv6) echo requests to any peer's address (a host-only peer's live Allow
//     entries) are accepted whatever the peer's ports and protocol,
//     within the budget, and their replies let in, all counted under
//     that name; no other ICMP type or protocol goes out.
//
// The host's loopback stays dropped even for a declared loopback peer:
// enforcer/session relays those into the namespace (enforcer/looprelay)
// instead of routing the session's packets to 127.0.0.0/8. Sessions with
// NET intents use the wall (enforcer/session: netns.go).
//
// Close removes the table and the link (the namespace side goes with
// it) and frees the address. Sweep removes what a killed klock left:
// klock_* tables whose link is gone or whose session is no longer alive,
// and kl-* links of sessions no longer alive.
//
// Guarantees: a packet from the session's namespace leaves the host or
// reaches one of its addresses only when a declared peer (or a live Allow
// entry) covers its destination address, port and protocol (an ICMP echo
// request with PingPeer: its address), or it belongs
// to a connection such a peer accepted (its established flow outlives an
// expired Allow entry, as in stateful firewalls); ingress is limited to
// replies. Another table of the host may still drop what netwall accepts
// (a forward chain with policy drop: klock doctor says so), never the
// reverse.
//
// Errors: ErrUnsupported from Allow for an IPv6 address when the session
// has no IPv6 (Wall.NoIPv6 says why); ErrNoAddress when 10.203.0.0/16 has no free /30; ErrUnknownPeer
// from AllowPeer; other errors wrap the failing netlink or nftables call's
// error, and Setup leaves nothing behind when it fails.
package netwall
