package wire

import (
	"encoding/json"
	"errors"
)

// Sentinel errors of a connection to klockd.
var (
	// ErrNoDaemon: nothing listens on the socket (klock run then runs the
	// session embedded).
	ErrNoDaemon = errors.New("klockd is not running")
	// ErrForbidden: the peer may not use klockd (not root, not in the
	// klock group, or inside a klock session), or may not do this request.
	ErrForbidden = errors.New("klockd: permission denied")
	// ErrProtocol: a frame could not be read or decoded, or was not the
	// one expected.
	ErrProtocol = errors.New("klockd: protocol error")
)

// Error is a typed refusal or failure reported by klockd: Class is
// machine-readable, Message is the server's full text (which names what is
// wrong and what would fix it). Lease, for class lease_conflict, is the
// lease manager's answer (enforcer/daemon decodes it).
type Error struct {
	Class   string          `json:"class"`
	Message string          `json:"message"`
	Lease   json.RawMessage `json:"lease,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Classes a client acts on: another session holds a conflicting lease
// (klock run exits 75 for it); the manifest did not parse (the klock front
// hands the run to the full CLI, whose located error the user then sees).
const (
	ClassLeaseConflict   = "lease_conflict"
	ClassInvalidManifest = "invalid_manifest"
	// ClassNoSession: no session by that id or container (the poststop
	// hook of a container klockd never adopted ends quietly).
	ClassNoSession = "no_session"
)
