package session

import (
	"sync"

	"github.com/klocklabs/klock/enforcer/lease"
)

// hostLeases is the lease store every session on this host shares: the
// embedded klock runs and klockd's sessions, and klock kill, klock
// rollback and klock leases, which read and revoke what they hold. It is
// opened once per process and never closed (the leases it holds are
// released one session at a time).
//
// This is the one place that says which store that is. Today it is a
// table in this process: the sessions of one klock process (klockd's, or
// session.Run called in-process by tests) coordinate, two embedded klock
// runs do not see each other yet.
//
// TODO(issue 21, lead at merge): return lease.OpenHost(lease.DefaultHostDir)
// once lease-engine's host-wide store is on main (an error then refuses a
// session, ErrSetup: it could not know what others hold), and make
// HostLeasesShared return true.
var hostLeases = sync.OnceValues(func() (lease.Store, error) {
	return lease.NewTable(), nil
})

// openHostLeases returns the host-wide lease store (hostLeases).
func openHostLeases() (lease.Store, error) { return hostLeases() }

// HostLeases is the host-wide lease store a session uses when
// Options.Leases is nil: what klock kill revokes and klock rollback
// consults.
func HostLeases() (lease.Store, error) { return openHostLeases() }

// HostLeasesShared reports whether HostLeases is shared by every klock
// process of the host (the host-wide store), rather than by this
// process's sessions alone.
func HostLeasesShared() bool { return false }
