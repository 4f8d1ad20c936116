//go:build linux

package detect

import (
	"errors"
	"os"
	"strings"

	"github.com/klocklabs/klock/enforcer/netwall"
)

// NetWall creates and removes, for real, a veth pair and an nftables table
// with what a session's packet wall uses (enforcer/netwall), and says what
// is missing. klock run builds it for every session with NET intents
// (not observe-only, not a container's); without it such a session is
// refused (ErrDegraded) unless --allow-degraded.
func NetWall() Check {
	c := Check{Name: "netwall", Guarantee: Blocks, Used: true}
	if !needRoot(&c) {
		return c
	}
	if err := netwall.Probe(); err != nil {
		c.Why = err.Error()
		var pe *netwall.ProbeError
		if errors.As(err, &pe) {
			c.Fix = pe.Fix
		} else {
			c.Fix = "a kernel with veth and nf_tables (CONFIG_VETH, CONFIG_NF_TABLES_INET, CONFIG_NFT_CT, CONFIG_NFT_MASQ, CONFIG_NFT_QUOTA)"
		}
		return c
	}
	c.OK = true
	c.Detail = "a network namespace per session joined by a veth pair with NAT; an nftables table per session drops packets to undeclared peers (any protocol), counts bytes per peer, enforces network.max_egress_bytes; declared host loopback services relayed into the namespace"
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil && strings.TrimSpace(string(b)) != "1" {
		c.Detail += "; net.ipv4.ip_forward is off: the first walled session turns it on (as Docker and Podman do)"
	}
	if blockers, err := netwall.ForwardBlockers(); err == nil && len(blockers) > 0 {
		c.Fix = "another table drops forwarded packets by default (" + strings.Join(blockers, ", ") + "): walled sessions reach no peer beyond this host unless it accepts traffic from kl-* links (e.g. iptables -I DOCKER-USER -i kl-+ -j ACCEPT, and -o kl-+ for replies)"
	}
	return c
}
