package session

import (
	"fmt"
	"sync"

	"github.com/klocklabs/klock/enforcer/lease"
)

// hostLeases is the lease store every session on this host shares: the
// embedded klock runs and klockd's sessions, and klock kill, klock
// rollback and klock leases, which read and revoke what they hold. It is
// opened once per process and never closed (the leases it holds are
// released one session at a time).
//
// This is the one place that says which store that is: lease.OpenHost on
// lease.DefaultHostDir, a journal every klock process of the host locks,
// reads and appends to. A session that cannot open it is refused
// (ErrSetup): it could not know what the others hold.
var hostLeases = sync.OnceValues(func() (lease.Store, error) {
	h, err := lease.OpenHost(lease.DefaultHostDir)
	if err != nil {
		return nil, fmt.Errorf("%w: open the host's lease store: %v", ErrSetup, err)
	}
	return h, nil
})

// openHostLeases returns the host-wide lease store (hostLeases).
func openHostLeases() (lease.Store, error) {
	if err := fleetRefusal(); err != nil {
		return nil, err
	}
	return hostLeases()
}

// HostLeases is the host-wide lease store a session uses when
// Options.Leases is nil: what klock kill revokes and klock rollback
// consults.
func HostLeases() (lease.Store, error) { return openHostLeases() }
