//go:build linux

package session

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/klocklabs/klock/enforcer/dnsproxy"
	"github.com/klocklabs/klock/policy"
)

// startLookup is how a session resolves its declared host names before the
// agent starts (policy.Ruleset.Resolve: the addresses its walls open at
// once).
//
// Without a DNS proxy of the session's own (a container, an unwalled
// network) the start addresses are all the walls will ever know of: a
// name that does not resolve then refuses the session.
//
// With one, the agent's own lookups go through the proxy, which opens the
// walls to what it answers, so the start lookup is only a head start, and
// it obeys the proxy's rules: a name that does not resolve yet is no
// reason to refuse (the proxy asks again when the agent does), and an
// answer the proxy would withhold as rebinding (loopback, private,
// link-local, metadata, this host's own addresses, unless the manifest
// declares the address) is not opened either. Names of the hosts file
// (localhost, an operator's entries) are the operator's own, not a DNS
// zone's: they are taken as they are.
func startLookup(ctx context.Context, resolve func(context.Context, string) ([]netip.Addr, error), rs *policy.Ruleset, proxied bool, log *slog.Logger) func(string) ([]netip.Addr, error) {
	if !proxied {
		return func(h string) ([]netip.Addr, error) {
			addrs, err := resolve(ctx, h)
			if err == nil && len(addrs) == 0 {
				err = fmt.Errorf("no addresses")
			}
			return addrs, err
		}
	}
	declared, local, own := rs.DeclaredPrefixes(), dnsproxy.HostAddrs(), hostsEntries(hostsFile)
	return func(h string) ([]netip.Addr, error) {
		addrs, err := resolve(ctx, h)
		if err != nil {
			log.Info("a declared host does not resolve at session start: the session's DNS proxy resolves it when the agent asks", "host", h, "error", err)
			return nil, nil
		}
		if n := strings.ToLower(strings.TrimSuffix(h, ".")); n == "localhost" || len(own[n]) > 0 {
			return addrs, nil
		}
		var keep []netip.Addr
		for _, a := range addrs {
			if why := dnsproxy.Classify(a, declared, local); why != "" {
				log.Warn("a declared host's start address withheld (DNS rebinding): declare the address in a NET intent to allow it", "host", h, "address", a, "why", why)
				continue
			}
			keep = append(keep, a)
		}
		return keep, nil
	}
}
