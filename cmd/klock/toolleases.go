package main

import (
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/session"
)

// toolLeases is the lease store klock mcp and klock tools serve take their
// calls' leases from (gateway.WithLeases): the host's, which agent
// sessions share, so a tool call and an agent session see each other's
// leases. It stays open for the process (the store is shared with the
// sessions a gateway's plugins run).
func toolLeases() (lease.Store, func(), error) {
	s, err := session.HostLeases()
	if err != nil {
		return nil, nil, err
	}
	return s, func() {}, nil
}
