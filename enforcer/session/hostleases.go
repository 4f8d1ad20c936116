package session

import (
	"errors"
	"fmt"
	"sync"

	"github.com/klocklabs/klock/enforcer/fleet"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/lease/etcdstore"
)

// hostLeases is the lease store every session on this host shares: the
// embedded klock runs and klockd's sessions, and klock kill, klock
// rollback and klock leases, which read and revoke what they hold. It is
// opened once per process and never closed (the leases it holds are
// released one session at a time).
//
// This is the one place that says which store that is. On a host whose
// klockd shares its leases with a fleet (the fleet marker: klockd --store
// etcd), it is the fleet's store on etcd, so that an embedded run, a tool
// gateway, klock kill and klock rollback see and take the same leases as
// every host's sessions (deciding from this host's journal alone would be
// blind to them). Otherwise it is lease.OpenHost on lease.DefaultHostDir,
// a journal every klock process of the host locks, reads and appends to.
// A session that cannot open it is refused (ErrSetup): it could not know
// what the others hold.
var hostLeases = sync.OnceValues(func() (lease.Store, error) {
	if s, err := fleetLeases(); !errors.Is(err, fleet.ErrNoFleet) {
		return s, err
	}
	h, err := lease.OpenHost(lease.DefaultHostDir)
	if err != nil {
		return nil, fmt.Errorf("%w: open the host's lease store: %v", ErrSetup, err)
	}
	return h, nil
})

// fleetLeases is the fleet's lease store when this host is in one
// (fleet.ErrNoFleet otherwise).
func fleetLeases() (lease.Store, error) {
	c, err := fleet.ReadMarker()
	if errors.Is(err, fleet.ErrNoFleet) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: klockd on this host shares leases with a fleet, but %v", ErrSetup, err)
	}
	cli, c, err := fleet.Dial(c)
	if err != nil {
		return nil, fmt.Errorf("%w: the fleet's lease store (%s): %v; or remove %s if this host has left the fleet", ErrSetup, c, err, fleet.MarkerPath())
	}
	return etcdstore.New(cli, c.Prefix, c.Host), nil
}

// openHostLeases returns the host-wide lease store (hostLeases).
func openHostLeases() (lease.Store, error) { return hostLeases() }

// HostLeases is the host-wide lease store a session uses when
// Options.Leases is nil: what klock kill revokes and klock rollback
// consults.
func HostLeases() (lease.Store, error) { return openHostLeases() }
