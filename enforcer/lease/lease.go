package lease

import (
	"errors"
	"time"

	"github.com/klocklabs/klock/policy"
)

var (
	// ErrInvalid: the request cannot be decided (no holder, no claim, a
	// claim on something nothing leases).
	ErrInvalid = errors.New("lease: invalid request")
	// ErrGone: the holder holds no active lease (they expired, were
	// released or revoked); a heartbeat for it is refused.
	ErrGone = errors.New("lease: no active lease")
	// ErrLost: a shared store could not keep the holder's leases (its
	// backend was unreachable past the TTL); a heartbeat returns it, with
	// ErrGone, and the session must stop at once (fail closed).
	ErrLost = errors.New("lease: leases lost: the store could not renew them")
	// ErrUnreachable: a shared store cannot reach its backend now; the
	// leases still hold until their TTL runs out without a renewal (then
	// ErrLost). A permissive session is frozen meanwhile.
	ErrUnreachable = errors.New("lease: the shared store is unreachable")
)

// Defaults of KLIS-3: a lease lives TTL after its last heartbeat, and is
// held Grace longer before it frees its resources (a holder that missed a
// heartbeat while busy is not robbed at once).
const (
	DefaultTTL   = 60 * time.Second
	MaxTTL       = 5 * time.Minute
	DefaultGrace = 15 * time.Second
)

// Holder is who holds or requests leases. Leases of one party (SameParty)
// never conflict with each other.
type Holder struct {
	// Tenant isolates API clients: a tenant sees and releases only its
	// own leases ("uid:1000", or a token's tenant name). Conflicts are
	// decided across tenants: they share the host's files.
	Tenant  string `json:"tenant,omitempty"`
	Agent   string `json:"agent"`
	Session string `json:"session"`
	// Group and Lead join holders of one tenant to one party: the tool
	// calls a gateway makes for an agent session ("run:<id>", the
	// gateway's --run-id) act for the session that leads the group (klock
	// run --gateway-run), and do not conflict with it. Two members that
	// are not the lead (two calls) still conflict with each other. A
	// holder is still heartbeated and released alone.
	Group string `json:"group,omitempty"`
	Lead  bool   `json:"lead,omitempty"`
}

// SameParty reports whether h and o never conflict: the same holder, or
// the lead of a group and a member of it, of one tenant (KLIS: the same
// subject in the same session is re-entrant; a session's tool calls act
// for it).
func (h Holder) SameParty(o Holder) bool {
	return h == o || h.Group != "" && h.Group == o.Group && h.Tenant == o.Tenant && (h.Lead || o.Lead)
}

// State is where a lease is in its life (KLIS-3).
type State uint8

const (
	Active State = iota
	Expired
	Released
	Revoked
)

func (s State) String() string {
	return [...]string{"Active", "Expired", "Released", "Revoked"}[s]
}

// MarshalText renders the state.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Claim is one intent of a request: a predicate on a resource. Intent is
// the intent as the manifest wrote it (for messages).
type Claim struct {
	Predicate policy.Predicate `json:"predicate"`
	Resource  Resource         `json:"-"`
	Intent    string           `json:"intent"`
}

// Lease is one granted claim.
type Lease struct {
	ID         string           `json:"id"`
	Holder     Holder           `json:"holder"`
	Predicate  policy.Predicate `json:"predicate"`
	Resource   Resource         `json:"-"`
	Object     string           `json:"object"` // Resource.String()
	Intent     string           `json:"intent,omitempty"`
	Age        time.Time        `json:"age"` // the holder's Wait-Die age
	AcquiredAt time.Time        `json:"acquired_at"`
	ExpiresAt  time.Time        `json:"expires_at"`
	TTL        time.Duration    `json:"ttl"`
	Grace      time.Duration    `json:"grace"`
	State      State            `json:"state"`
	EndedAt    time.Time        `json:"ended_at,omitempty"`
	// Host is the machine whose store granted the lease (a fleet store
	// shares leases across hosts); empty for a host-local store.
	Host string `json:"host,omitempty"`
	// Fence is the fencing token of the grant (a fleet store: the etcd
	// revision that committed it); 0 when the store has none.
	Fence int64 `json:"fence,omitempty"`
}

// HeldAt reports whether the lease still holds its resource at now: active
// and not past ExpiresAt + Grace.
func (l *Lease) HeldAt(now time.Time) bool {
	return l.State == Active && !now.After(l.ExpiresAt.Add(l.Grace))
}

// Request asks for every claim at once, for Holder.
type Request struct {
	Holder Holder
	Claims []Claim
	// Age is the time of the holder's first attempt (kept across retries:
	// it is what makes a retrying requester older than newcomers). Zero
	// means now.
	Age time.Time
	// TTL is the lease lifetime without a heartbeat; zero means DefaultTTL,
	// more than MaxTTL is cut to MaxTTL. Grace likewise (zero: DefaultGrace).
	TTL, Grace time.Duration
}

// Outcome is Wait-Die's answer to a whole request.
type Outcome uint8

const (
	Granted Outcome = iota
	Wait
	Die
)

func (o Outcome) String() string { return [...]string{"GRANTED", "WAIT", "DIE"}[o] }

// MarshalText renders the outcome.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Conflict is one claim of a request against one lease another holder has.
type Conflict struct {
	Claim Claim `json:"claim"`
	Held  Lease `json:"held"`
	// Outcome is Wait-Die's answer for this pair: Wait (the requester is
	// older) or Die.
	Outcome Outcome `json:"outcome"`
}

// Decision answers a request. A Granted one holds its leases (one per
// claim, in the request's order: Leases, Lease, NumLeases).
type Decision struct {
	Outcome   Outcome    `json:"outcome"`
	Conflicts []Conflict `json:"conflicts,omitempty"` // Wait, Die: every conflict found
	// WaitTime is a hint for Wait and Die: when the first conflicting lease
	// runs out if its holder stops heartbeating.
	WaitTime time.Duration `json:"wait_time,omitempty"`
	Age      time.Time     `json:"age"` // the age the request was decided with
	granted  granted
}
