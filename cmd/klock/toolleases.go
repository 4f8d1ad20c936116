package main

import (
	"github.com/klocklabs/klock/enforcer/lease"
)

// toolLeases is the lease store klock mcp and klock tools serve take their
// calls' leases from (gateway.WithLeases), and what closes it. For now an
// in-process table: the calls of one gateway coordinate with each other
// only. The lead switches this one function to the host-wide store that
// agent sessions share (lease.OpenHost(lease.DefaultHostDir), or
// session.HostLeases) when it lands, so a tool call and an agent session
// on the host see each other's leases.
func toolLeases() (lease.Store, func(), error) {
	t := lease.NewTable()
	return t, func() { _ = t.Close() }, nil
}
