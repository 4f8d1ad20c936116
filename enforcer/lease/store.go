package lease

import (
	"context"
	"time"
)

// Store is a lease manager: the in-memory Table, the host-wide store that
// embedded sessions and klockd share, or a fleet's store. Every method is
// safe for concurrent use and linearizable.
type Store interface {
	// Acquire decides req once, whole: Granted (and the leases are held),
	// Wait or Die (and nothing is held). It does not block; see
	// AcquireWait for the retry loop.
	Acquire(ctx context.Context, req Request) (Decision, error)
	// Heartbeat renews every active lease of h: ExpiresAt = now + its TTL.
	// ErrGone when h holds none.
	Heartbeat(ctx context.Context, h Holder) (time.Time, error)
	// Release frees the leases of h with the given ids, or all of them
	// when ids is empty; it returns how many it freed.
	Release(ctx context.Context, h Holder, ids ...string) (int, error)
	// Revoke frees, whoever holds them, the lease with this id or every
	// lease of the session with this id (an operator's FORCE_REVOKE).
	Revoke(ctx context.Context, idOrSession string) (int, error)
	// List returns the leases f selects.
	List(ctx context.Context, f Filter) ([]Lease, error)
	// Close releases what the store holds open (not the leases).
	Close() error
}

// Fencer is a store whose grants carry fencing tokens (Lease.Fence): a
// shared store, where a holder paused past its TTL may find its scope
// granted to another host. CheckFence returns nil while l's grant still
// holds, an error wrapping ErrGone when it no longer does, and any other
// error when the store cannot tell (which a caller must treat as gone:
// acting on an unknown grant fails open).
type Fencer interface {
	CheckFence(ctx context.Context, l Lease) error
}

// Filter selects leases for List. The zero Filter selects every lease
// held now.
type Filter struct {
	Tenant  string // "" any
	Session string // "" any
	// Overlapping, when set, keeps leases whose resource overlaps it.
	Overlapping *Resource
	// EndedSince includes leases that stopped being held at or after this
	// time (released, expired or revoked), as far as the store remembers.
	EndedSince time.Time
}
