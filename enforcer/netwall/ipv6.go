//go:build linux

package netwall

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Range6 is where session IPv6 addresses come from: a unique local /48
// ("klock" in its hex digits), one /64 per session, numbered as its /30
// in Range (slot s: Range6's 4th group is s), ::1 on the host side and
// ::2 in the namespace.
var Range6 = netip.MustParsePrefix("fd6b:6c6f:636b::/48")

// Metadata6 is the IPv6 cloud metadata address (AWS's), dropped unless
// Config.AllowMetadata, as Metadata is.
var Metadata6 = netip.MustParseAddr("fd00:ec2::254")

// ErrNoIPv6: this host cannot route IPv6 for a session (Wall.NoIPv6
// wraps it with the reason and the fix).
var ErrNoIPv6 = errors.New("netwall: no IPv6")

// ipv6Conf is where the IPv6 sysctls are (a variable: a test points it
// at a host without IPv6).
var ipv6Conf = "/proc/sys/net/ipv6/conf/"

// ICMPv6 types the wall lets pass between the session and the host side
// of its link without a peer: neighbor discovery and multicast listener
// reports (RFC 4861, RFC 3810) are what IPv6 needs to find the gateway
// at all, as ARP for IPv4 (which no inet table sees). Router
// advertisements and redirects from the session are never among them.
var (
	linkControlOut = []byte{131, 132, 133, 135, 136, 143} // MLD report/done, RS, NS, NA, MLDv2 report
	linkControlIn  = []byte{130, 131, 132, 135, 136, 143} // MLD query, report/done, NS, NA, MLDv2 report
	// hostErrors are the host's own ICMPv6 errors about the session's
	// packets: destination unreachable (no route: the agent's connect
	// fails with ENETUNREACH, not a silent hang), packet too big (path
	// MTU) and time exceeded. The host reports "no route" before any flow
	// is confirmed, so conntrack cannot relate the error to one.
	hostErrors = []byte{1, 2, 3}
)

// ipv6Available says why the host cannot give a session IPv6 (nil when
// it can): the kernel has none, or the administrator disabled it.
func ipv6Available() error {
	if _, err := os.Stat(ipv6Conf + "all"); err != nil {
		return fmt.Errorf("%w: the kernel has no IPv6 (booted with ipv6.disable=1, or built without it)", ErrNoIPv6)
	}
	for _, c := range []string{"all", "default"} {
		b, err := os.ReadFile(ipv6Conf + c + "/disable_ipv6")
		if err == nil && strings.TrimSpace(string(b)) == "1" {
			return fmt.Errorf("%w: IPv6 is disabled on this host (net.ipv6.conf.%s.disable_ipv6 = 1; the fix: sysctl -w net.ipv6.conf.%s.disable_ipv6=0)", ErrNoIPv6, c, c)
		}
	}
	return nil
}

// slotAddr6 is address n of slot's /64 in Range6.
func slotAddr6(slot uint32, n byte) netip.Addr {
	b := Range6.Addr().As16()
	b[6], b[7] = byte(slot>>8), byte(slot)
	b[15] = n
	return netip.AddrFrom16(b)
}

// hostSide6 gives the host side l its IPv6 address, or, when the host
// has no IPv6 for sessions, keeps IPv6 off on it (the session's IPv6
// packets then never reach the host's netfilter).
func (w *Wall) hostSide6(l netlink.Link, slot uint32) error {
	if w.NoIPv6 = ipv6Available(); w.NoIPv6 != nil {
		_ = os.WriteFile(ipv6Conf+w.Link+"/disable_ipv6", []byte("1"), 0)
		return nil
	}
	w.HostAddr6, w.Addr6 = slotAddr6(slot, 1), slotAddr6(slot, 2)
	// accept_ra 0: a router advertisement from the session must never
	// configure the host's routes.
	for _, s := range []struct{ key, val string }{{"accept_ra", "0"}, {"forwarding", "1"}} {
		if err := os.WriteFile(ipv6Conf+w.Link+"/"+s.key, []byte(s.val), 0); err != nil {
			return fmt.Errorf("netwall: %w", err)
		}
	}
	// No duplicate address detection: the link is new and the address
	// ours, and DAD would hold it unusable for a second.
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet6(w.HostAddr6, 64), Flags: unix.IFA_F_NODAD}); err != nil {
		return fmt.Errorf("netwall: address %s on %s: %w", w.HostAddr6, w.Link, err)
	}
	return ensureForwarding6()
}

// ensureForwarding6 turns net.ipv6.conf.all.forwarding on when off, as
// ensureForwarding does for IPv4: the replies to the session arrive on
// the host's uplink, and IPv6 forwards only with it on. Forwarding on
// makes the kernel ignore router advertisements on links whose accept_ra
// is 1: those that hold routes learned from them are set to 2 first
// (accept them while forwarding), so a host configured by SLAAC keeps its
// routes. No other link, and not the default for new ones, is changed: a
// link accepting advertisements while the host forwards lets whoever is
// on it (a container on a bridge) route the host.
func ensureForwarding6() error {
	p := ipv6Conf + "all/forwarding"
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("netwall: %w", err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := keepRouterAdvertisements(); err != nil {
		return err
	}
	if err := os.WriteFile(p, []byte("1"), 0); err != nil {
		return fmt.Errorf("netwall: turn on %s: %w", p, err)
	}
	return nil
}

// keepRouterAdvertisements sets accept_ra to 2 on the links whose
// accept_ra is 1 and that have routes from router advertisements.
func keepRouterAdvertisements() error {
	links, err := consistent(netlink.LinkList)
	if err != nil {
		return fmt.Errorf("netwall: list links: %w", err)
	}
	for _, l := range links {
		name := l.Attrs().Name
		ra, err := os.ReadFile(ipv6Conf + name + "/accept_ra")
		if err != nil || strings.TrimSpace(string(ra)) != "1" || !hasRARoutes(l) {
			continue
		}
		if err := os.WriteFile(ipv6Conf+name+"/accept_ra", []byte("2"), 0); err != nil {
			return fmt.Errorf("netwall: keep router advertisements on %s before turning on IPv6 forwarding: %w", name, err)
		}
	}
	return nil
}

// hasRARoutes reports whether l has IPv6 routes router advertisements
// made (its default route, its on-link prefixes).
func hasRARoutes(l netlink.Link) bool {
	rs, err := consistent(func() ([]netlink.Route, error) { return netlink.RouteList(l, netlink.FAMILY_V6) })
	if err != nil {
		return false
	}
	for _, r := range rs {
		if r.Protocol == unix.RTPROT_RA {
			return true
		}
	}
	return false
}

// nsSide6 gives the namespace's eth0 its IPv6 address and a default
// route through the host side. A namespace that refuses IPv6 (its own
// disable_ipv6) leaves the session without it: NoIPv6 says why.
func (w *Wall) nsSide6(h *netlink.Handle, l netlink.Link) error {
	if !w.Addr6.IsValid() {
		return nil
	}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipnet6(w.Addr6, 64), Flags: unix.IFA_F_NODAD}); err != nil {
		w.NoIPv6 = fmt.Errorf("%w: address %s in the session's namespace: %v", ErrNoIPv6, w.Addr6, err)
		w.HostAddr6, w.Addr6 = netip.Addr{}, netip.Addr{}
		return nil
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.IP(w.HostAddr6.AsSlice())}); err != nil {
		return fmt.Errorf("netwall: IPv6 default route: %w", err)
	}
	if err := w.neighbors6(h, l); err != nil {
		return err
	}
	// An address added before its link was up stays tentative until the
	// kernel's address worker has run, even without DAD, and is no source
	// until then.
	if err := waitAddr6(h, nsLink, w.Addr6); err != nil {
		return err
	}
	return waitAddr6(nil, w.Link, w.HostAddr6)
}

// neighbors6 makes each end of the link know the other's link-layer
// address for good: until the kernel's address worker has run, the host
// side has not joined its solicited-node group and ignores the session's
// first neighbor solicitation, and the agent's first packets would wait
// a second for the next one. Both addresses are ours and fixed for the
// link's life: neighbor discovery has nothing to find.
func (w *Wall) neighbors6(h *netlink.Handle, ns netlink.Link) error {
	host, err := netlink.LinkByName(w.Link)
	if err != nil {
		return fmt.Errorf("netwall: %s: %w", w.Link, err)
	}
	if err := h.NeighSet(&netlink.Neigh{LinkIndex: ns.Attrs().Index, Family: netlink.FAMILY_V6, State: netlink.NUD_PERMANENT,
		IP: net.IP(w.HostAddr6.AsSlice()), HardwareAddr: host.Attrs().HardwareAddr}); err != nil {
		return fmt.Errorf("netwall: the gateway's neighbor entry: %w", err)
	}
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: w.ifindex, Family: netlink.FAMILY_V6, State: netlink.NUD_PERMANENT,
		IP: net.IP(w.Addr6.AsSlice()), HardwareAddr: ns.Attrs().HardwareAddr}); err != nil {
		return fmt.Errorf("netwall: the session's neighbor entry: %w", err)
	}
	return nil
}

// waitAddr6 polls a on link name (through h, or the host's netlink when
// nil) until it is no longer tentative, for at most a second.
func waitAddr6(h *netlink.Handle, name string, a netip.Addr) error {
	if h == nil {
		h = &netlink.Handle{}
	}
	deadline := time.Now().Add(time.Second)
	for {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("netwall: %s: %w", name, err)
		}
		addrs, err := consistent(func() ([]netlink.Addr, error) { return h.AddrList(l, unix.AF_INET6) })
		if err != nil {
			return fmt.Errorf("netwall: addresses of %s: %w", name, err)
		}
		for _, x := range addrs {
			if x.IP.Equal(net.IP(a.AsSlice())) && x.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netwall: %s on %s is still tentative after a second", a, name)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// linkControl6 accepts, in base chain ch, the ICMPv6 link control
// traffic of types on the session's link (key: iif from the session,
// oif to it) before any peer is looked at.
func (w *Wall) linkControl6(ch *nftables.Chain, key expr.MetaKey, types []byte) {
	for _, typ := range types {
		w.conn.AddRule(&nftables.Rule{Table: w.table, Chain: ch, Exprs: cat(metaEq(key, u32(uint32(w.ifindex))), ipv6(),
			l4(unix.IPPROTO_ICMPV6), icmpType(typ), verdict(expr.VerdictAccept))})
	}
}

// egress6 queues the IPv6 drops that come before the peers: a forged
// source, the host's loopback, the metadata address.
func (w *Wall) egress6(drop func([]expr.Any), allowMetadata bool) {
	drop(cat(ipv6(), ip6Field(8, netip.PrefixFrom(w.Addr6, 128))[:1], []expr.Any{&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: w.Addr6.AsSlice()}}))
	drop(cat(ipv6(), ip6Field(24, netip.PrefixFrom(netip.IPv6Loopback(), 128))))
	if !allowMetadata {
		drop(cat(ipv6(), ip6Field(24, netip.PrefixFrom(Metadata6, 128))))
	}
}

// masq6 masquerades the session's IPv6 address on its way out (NAT66,
// as IPv4's): a unique local address is routed nowhere past the host.
func (w *Wall) masq6(post *nftables.Chain) {
	w.conn.AddRule(&nftables.Rule{Table: w.table, Chain: post, Exprs: cat(ipv6(), ip6Field(8, netip.PrefixFrom(w.Addr6, 128)),
		[]expr.Any{&expr.Meta{Key: expr.MetaKeyOIF, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: u32(uint32(w.ifindex))}},
		[]expr.Any{&expr.Masq{}})})
}

func ipv6() []expr.Any { return metaEq(expr.MetaKeyNFPROTO, []byte{unix.NFPROTO_IPV6}) }

// ip6Field matches the IPv6 address at offset (8: source, 24:
// destination) against p.
func ip6Field(offset uint32, p netip.Prefix) []expr.Any {
	e := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 16}}
	if p.Bits() < 128 {
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 16, Mask: net.CIDRMask(p.Bits(), 128), Xor: make([]byte, 16)})
	}
	return append(e, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()})
}

func ipnet6(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, 128)}
}
