package leaseapi

import (
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
)

// This file is the API's wire shapes, shared by the server and the client.
// Durations are integer milliseconds (KLIS writes ttl and expires_in_ms),
// timestamps are RFC 3339, a requester's age ("timestamp") is milliseconds
// since the Unix epoch as KLIS intents carry it.

// Intent is a KLIS intent triple {subject, predicate, object}.
type Intent struct {
	Subject   string `json:"subject,omitempty"`
	Predicate string `json:"predicate"`
	Object    string `json:"object"`
}

// Lease is a lease as the API shows it. A lease of another tenant is shown
// only inside a conflict and Redacted: its predicate and expiry, nothing
// that names it, its holder or its object.
type Lease struct {
	LeaseID   string  `json:"lease_id,omitempty"`
	Redacted  bool    `json:"redacted,omitempty"`
	Tenant    string  `json:"tenant,omitempty"`
	AgentID   string  `json:"agent_id,omitempty"`
	SessionID string  `json:"session_id,omitempty"`
	Predicate string  `json:"predicate"`
	Object    string  `json:"object,omitempty"`
	Intent    *Intent `json:"intent,omitempty"`
	State     string  `json:"state,omitempty"`
	// Timestamp is the holder's Wait-Die age (ms since the epoch).
	Timestamp  int64     `json:"timestamp,omitempty"`
	AcquiredAt time.Time `json:"acquired_at,omitzero"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	// ExpiresInMS is KLIS's expires_in_ms: how long until ExpiresAt without
	// a heartbeat (the lease still holds its resource GraceMS longer).
	ExpiresInMS int64     `json:"expires_in_ms"`
	TTLMS       int64     `json:"ttl_ms,omitempty"`
	GraceMS     int64     `json:"grace_ms,omitempty"`
	EndedAt     time.Time `json:"ended_at,omitzero"`
	// Host granted the lease (a fleet's shared store); Fence is its
	// fencing token. Both are absent for a host-local store.
	Host  string `json:"host,omitempty"`
	Fence int64  `json:"fence,omitempty"`
}

// Holder names a lease holder. Redacted: another tenant's.
type Holder struct {
	Tenant    string `json:"tenant,omitempty"`
	AgentID   string `json:"agent_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	Redacted  bool   `json:"redacted,omitempty"`
}

// ManifestRequest is POST /v1/manifest as the Go client sends it (the
// server also accepts intents in KLIS's map form).
type ManifestRequest struct {
	AgentID   string   `json:"agent_id"`
	SessionID string   `json:"session_id"`
	Intents   []string `json:"intents"`
	// Timestamp is the requester's age: its first attempt, ms since the
	// epoch. Zero: now (the answer's Timestamp is the age to retry with).
	Timestamp     int64 `json:"timestamp,omitempty"`
	TTLMS         int64 `json:"ttl_ms,omitempty"`
	GraceMS       int64 `json:"grace_ms,omitempty"`
	WaitTimeoutMS int64 `json:"wait_timeout_ms,omitempty"`
}

// ManifestResponse answers POST /v1/manifest: 200 GRANTED, or 409 DIE or
// WAIT (then also a typed error: error_class die or wait).
type ManifestResponse struct {
	OK         bool   `json:"ok"`
	Success    bool   `json:"success"` // KLIS: granted
	Outcome    string `json:"outcome"` // GRANTED, DIE (KLIS-7's Denied) or WAIT
	Reason     string `json:"reason,omitempty"`
	ErrorClass Class  `json:"error_class,omitempty"`
	Retryable  bool   `json:"retryable,omitempty"`
	Message    string `json:"message,omitempty"`
	// Timestamp is the age the request was decided with: send it back to
	// keep it across retries.
	Timestamp int64      `json:"timestamp"`
	Leases    []Lease    `json:"leases,omitempty"`
	Unleased  []Unleased `json:"unleased,omitempty"`
	Conflicts []Conflict `json:"conflicts,omitempty"`
	// WaitTime (ms): when the first conflicting lease runs out if its
	// holder stops heartbeating.
	WaitTime int64 `json:"wait_time,omitempty"`
	// WaitedMS: how long the request blocked (wait_timeout_ms).
	WaitedMS int64 `json:"waited_ms,omitempty"`
}

// Unleased is an intent of a manifest that leases nothing, and why
// (running a program is not owning it; /proc is a kernel view).
type Unleased struct {
	Intent string `json:"intent"`
	Why    string `json:"why"`
}

// Conflict is one of the requester's intents against a lease another
// holder has.
type Conflict struct {
	// Intent is the requester's intent; Predicate alone when the requester
	// is another tenant (the contention a tenant sees on its own leases).
	Intent    string `json:"intent,omitempty"`
	Predicate string `json:"predicate"`
	Outcome   string `json:"outcome"` // WAIT or DIE
	Held      Lease  `json:"held"`
}

// HolderRef names a session: the holder of leases.
type HolderRef struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
}

// Targets selects leases for heartbeat, release and reconcile: sessions
// (every lease they hold) and lease ids. AgentID and SessionID are
// shorthand for one session.
type Targets struct {
	AgentID   string      `json:"agent_id,omitempty"`
	SessionID string      `json:"session_id,omitempty"`
	Sessions  []HolderRef `json:"sessions,omitempty"`
	LeaseIDs  []string    `json:"lease_ids,omitempty"`
}

// ItemResult is one target's outcome in a bulk heartbeat.
type ItemResult struct {
	AgentID     string    `json:"agent_id,omitempty"`
	SessionID   string    `json:"session_id,omitempty"`
	LeaseID     string    `json:"lease_id,omitempty"`
	OK          bool      `json:"ok"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
	ExpiresInMS int64     `json:"expires_in_ms,omitempty"`
	ErrorClass  Class     `json:"error_class,omitempty"`
	Message     string    `json:"message,omitempty"`
}

// HeartbeatResponse answers POST /v1/leases/heartbeat: one result per
// target, sessions first, in request order.
type HeartbeatResponse struct {
	OK      bool         `json:"ok"`
	Results []ItemResult `json:"results"`
}

// ReleaseResponse answers POST /v1/leases/release.
type ReleaseResponse struct {
	OK       bool `json:"ok"`
	Released int  `json:"released"`
}

// ReconcileResponse answers POST /v1/leases/reconcile: of the lease ids
// the client listed, those active (held by it now) and those gone; and the
// leases it holds (in the named session, or anywhere in its tenant) that it
// did not list.
type ReconcileResponse struct {
	OK       bool     `json:"ok"`
	Active   []Lease  `json:"active"`
	Gone     []string `json:"gone"`
	Unlisted []Lease  `json:"unlisted"`
}

// RevokeRequest is POST /v1/leases/revoke: a lease id or a session id.
type RevokeRequest struct {
	ID string `json:"id"`
}

// RevokeResponse answers it.
type RevokeResponse struct {
	OK      bool `json:"ok"`
	Revoked int  `json:"revoked"`
}

// ListResponse answers GET /v1/leases.
type ListResponse struct {
	OK     bool    `json:"ok"`
	Leases []Lease `json:"leases"`
}

// StateResponse answers GET /v1/resource/{object}/state: the visible
// leases overlapping the object, and how many of other tenants' overlap it
// too (Hidden; they are not shown).
type StateResponse struct {
	OK     bool    `json:"ok"`
	Object string  `json:"object"`
	Leases []Lease `json:"leases"`
	Hidden int     `json:"hidden"`
}

// Contention is one ContentionDetected: a request that was answered DIE or
// WAIT, as the caller may see it.
type Contention struct {
	Time      time.Time  `json:"time"`
	Requester Holder     `json:"requester"`
	Outcome   string     `json:"outcome"`
	Timestamp int64      `json:"timestamp,omitempty"`
	WaitTime  int64      `json:"wait_time,omitempty"`
	Conflicts []Conflict `json:"conflicts"`
	// Count is how many times in a row this requester met this same
	// contention (a waiting request is retried).
	Count int `json:"count,omitempty"`
}

// Waiting is a request blocked in POST /v1/manifest now.
type Waiting struct {
	Requester Holder     `json:"requester"`
	Timestamp int64      `json:"timestamp"`
	Since     time.Time  `json:"since"`
	Deadline  time.Time  `json:"deadline"`
	Conflicts []Conflict `json:"conflicts"`
}

// ContentionResponse answers GET /v1/contention, newest first.
type ContentionResponse struct {
	OK      bool         `json:"ok"`
	Recent  []Contention `json:"recent"`
	Waiting []Waiting    `json:"waiting"`
}

// Event is the data of one server-sent event (its "event:" is Type).
type Event struct {
	Type       string      `json:"type"`
	Time       time.Time   `json:"time"`
	Lease      *Lease      `json:"lease,omitempty"`
	Contention *Contention `json:"contention,omitempty"`
}

// view is l as its own tenant (or the admin) sees it.
func view(l *lease.Lease, now time.Time) Lease {
	v := Lease{
		LeaseID: l.ID, Tenant: l.Holder.Tenant, AgentID: l.Holder.Agent, SessionID: l.Holder.Session,
		Predicate: l.Predicate.String(), Object: l.Object, State: l.State.String(),
		Intent:    &Intent{Subject: l.Holder.Agent, Predicate: l.Predicate.String(), Object: l.Object},
		Timestamp: l.Age.UnixMilli(), AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt,
		ExpiresInMS: ms(l.ExpiresAt.Sub(now)), TTLMS: ms(l.TTL), GraceMS: ms(l.Grace), EndedAt: l.EndedAt,
		Host: l.Host, Fence: l.Fence,
	}
	if v.Object == "" {
		v.Object = l.Resource.String()
		v.Intent.Object = v.Object
	}
	return v
}

// redacted is l as another tenant sees it in a conflict.
func redacted(l *lease.Lease, now time.Time) Lease {
	return Lease{Redacted: true, Predicate: l.Predicate.String(), ExpiresAt: l.ExpiresAt,
		ExpiresInMS: ms(l.ExpiresAt.Sub(now)), GraceMS: ms(l.Grace)}
}

// View is l as the admin sees it: the API's lease object, for a client
// that reads a store directly (klock leases without klockd, as root).
func View(l *lease.Lease, now time.Time) Lease { return view(l, now) }
