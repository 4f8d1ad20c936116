//go:build linux

package session

import (
	"net/netip"

	"github.com/vishvananda/netlink"
)

// The session's namespace gets IPv6 from its wall (netwall: a /64 of
// its own, NAT66 on the way out) when the host has IPv6. Two things the
// agent cannot tell from its side are said in the log at the start: a
// host without IPv6 (every declared IPv6 peer unreachable, and the fix),
// and a declared IPv6 peer the host has no route to (the agent's connect
// fails with ENETUNREACH, as it would without klock).

// checkIPv6 notes, once the wall is up, the declared IPv6 peers the
// session cannot reach, and why.
func (n *sessionNet) checkIPv6() {
	for _, p := range n.plan.cfg.Peers {
		if !p.Prefix.IsValid() || p.Prefix.Addr().Unmap().Is4() {
			continue
		}
		if n.wall.NoIPv6 != nil {
			n.unroutedPeer(p.Name, n.wall.NoIPv6.Error())
			continue
		}
		if why := hostRoute6(p.Prefix.Addr()); why != "" {
			n.unroutedPeer(p.Name, why+": the agent's connect fails with ENETUNREACH, as it would without klock")
		}
	}
	for name, addrs := range n.plan.start {
		for _, a := range addrs {
			if n.wall.NoIPv6 != nil && a.Is6() && !a.Is4In6() {
				n.unroutedPeer(name, a.String()+": "+n.wall.NoIPv6.Error())
			}
		}
	}
}

// hostRoute6 says why the host cannot route to a ("" when it can).
func hostRoute6(a netip.Addr) string {
	if _, err := netlink.RouteGet(a.AsSlice()); err != nil {
		return "this host has no IPv6 route to " + a.String() + " (" + err.Error() + ")"
	}
	return ""
}

// unroutedPeer records and logs that peer cannot be reached, and why.
func (n *sessionNet) unroutedPeer(peer, why string) {
	n.mu.Lock()
	n.unrouted = append(n.unrouted, peer+": "+why)
	n.mu.Unlock()
	n.log.Warn("a declared IPv6 peer is unreachable from the agent's network namespace", "peer", peer, "why", why)
}

// noIPv6Answer notes, once per peer, that an AAAA answer for a declared
// host opens nothing: this host gives the session no IPv6.
func (n *sessionNet) noIPv6Answer(peer string, a netip.Addr) {
	n.mu.Lock()
	seen := n.noV6Answers[peer]
	if n.noV6Answers == nil {
		n.noV6Answers = map[string]bool{}
	}
	n.noV6Answers[peer] = true
	n.mu.Unlock()
	if !seen {
		n.unroutedPeer(peer, "the IPv6 answer "+a.String()+" (and any other): "+n.wall.NoIPv6.Error())
	}
}

// ipv6Detail is the session's IPv6 in the wall's log entry.
func (n *sessionNet) ipv6Detail() string {
	if n.wall.Addr6.IsValid() {
		return "; IPv6 " + n.wall.Addr6.String() + ", gateway " + n.wall.HostAddr6.String() + ", masqueraded"
	}
	if n.wall.NoIPv6 != nil {
		return "; no IPv6: " + n.wall.NoIPv6.Error()
	}
	return ""
}
