package main

import (
	"fmt"
	"os"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/session"
)

// toolLeases is the lease store klock mcp and klock tools serve take their
// calls' leases from (gateway.WithLeases): the host's, which agent
// sessions share, so a tool call and an agent session see each other's
// leases. It stays open for the process (the store is shared with the
// sessions a gateway's plugins run).
//
// The host's store is root's (/run/klock/leases, 0700). A gateway run by
// another user cannot take leases there: it says so on stderr and its
// calls coordinate with each other only (an in-process table). Root that
// cannot open it is refused.
//
// On a host whose klockd shares its leases with a fleet, the host's store
// is the fleet's on etcd (session.HostLeases), so a tool call and a
// session on another host see each other's leases; each grant's fencing
// token is checked at dispatch.
func toolLeases() (lease.Store, func(), error) {
	s, err := session.HostLeases()
	if err == nil {
		return s, func() {}, nil
	}
	if os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "klock: warning: tool calls take no lease in the host's lease store (%v): it is root's; this gateway's calls coordinate with each other only, not with agent sessions. Run the gateway as root for that.\n", err)
		t := lease.NewTable()
		return t, func() { _ = t.Close() }, nil
	}
	return nil, nil, err
}
