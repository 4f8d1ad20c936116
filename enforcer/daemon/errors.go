package daemon

import (
	"encoding/json"
	"errors"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
)

// Sentinel errors of the daemon itself.
var (
	// ErrForbidden: the peer may not use klockd (not root, not in the klock
	// group, or inside a klock session), or may not do this request.
	ErrForbidden = wire.ErrForbidden
	// ErrNoDaemon: nothing listens on the socket (RunViaDaemon then falls
	// back to the embedded path).
	ErrNoDaemon = wire.ErrNoDaemon
	// ErrNoSession: klock kill named a session klockd does not run.
	ErrNoSession = errors.New("klockd: no such session")
	// ErrBadRequest: the request is malformed or names something invalid.
	ErrBadRequest = errors.New("klockd: bad request")
	// ErrProtocol: a frame could not be read or decoded.
	ErrProtocol = wire.ErrProtocol
	// ErrShutdown: klockd is shutting down and takes no new session.
	ErrShutdown = errors.New("klockd: shutting down")
)

// Error classes on the wire.
const (
	ClassForbidden       = "forbidden"
	ClassNoSession       = wire.ClassNoSession
	ClassBadRequest      = "bad_request"
	ClassShutdown        = "shutdown"
	ClassInvalidManifest = wire.ClassInvalidManifest
	ClassDegraded        = "degraded"
	ClassObserveStrict   = "observe_strict"
	ClassLeaseConflict   = wire.ClassLeaseConflict
	ClassSetup           = "setup"
	ClassNotRoot         = "not_root"
	ClassNoLandlock      = "no_landlock"
	ClassUnexpressible   = "unexpressible"
	ClassRootNotExplicit = "root_not_explicit"
	ClassNoUser          = "no_user"
	ClassBadSpec         = "bad_spec"
	ClassLaunchSetup     = "launch_setup"
	ClassInternal        = "internal"
)

// classes maps each class to the sentinel errors.Is finds in an *Error, so
// a caller checks a daemon's refusal as it checks the embedded path's
// (errors.Is(err, session.ErrDegraded)). Order matters on the server: the
// first sentinel the error matches names its class.
var classes = []struct {
	class string
	err   error
}{
	{ClassForbidden, ErrForbidden},
	{ClassNoSession, ErrNoSession},
	{ClassBadRequest, ErrBadRequest},
	{ClassShutdown, ErrShutdown},
	{ClassInvalidManifest, policy.ErrInvalidManifest},
	{ClassDegraded, session.ErrDegraded},
	{ClassObserveStrict, session.ErrObserveStrict},
	{ClassLeaseConflict, session.ErrLeaseConflict},
	{ClassSetup, session.ErrSetup},
	{ClassNotRoot, launch.ErrNotRoot},
	{ClassNoLandlock, launch.ErrNoLandlock},
	{ClassUnexpressible, launch.ErrUnexpressible},
	{ClassRootNotExplicit, launch.ErrRootNotExplicit},
	{ClassNoUser, launch.ErrNoUser},
	{ClassBadSpec, launch.ErrBadSpec},
	{ClassLaunchSetup, launch.ErrSetup},
}

// Error is a typed refusal or failure reported by klockd: Class is
// machine-readable, Message is the server's full text (which names what is
// wrong and what would fix it).
type Error struct {
	Class   string `json:"class"`
	Message string `json:"message"`
	// Lease, for ClassLeaseConflict: the lease manager's answer, which
	// errors.As turns back into a *session.LeaseConflictError.
	Lease *WireLeaseConflict `json:"lease,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Is matches the sentinel of e's class.
func (e *Error) Is(target error) bool {
	for _, c := range classes {
		if c.class == e.Class {
			return target == c.err
		}
	}
	return false
}

// wireError classifies err for the wire.
func wireError(err error) *Error {
	var de *Error
	if errors.As(err, &de) {
		return de
	}
	for _, c := range classes {
		if errors.Is(err, c.err) {
			e := &Error{Class: c.class, Message: err.Error()}
			var lc *session.LeaseConflictError
			if errors.As(err, &lc) {
				e.Lease = toWireConflict(lc)
			}
			return e
		}
	}
	return &Error{Class: ClassInternal, Message: err.Error()}
}

// fromWire is the typed form of a refusal a client read: its class's
// sentinel for errors.Is, its lease conflict for errors.As.
func fromWire(err error) error {
	var we *wire.Error
	if !errors.As(err, &we) {
		return err
	}
	e := &Error{Class: we.Class, Message: we.Message}
	if len(we.Lease) > 0 {
		lc := &WireLeaseConflict{}
		if json.Unmarshal(we.Lease, lc) == nil {
			e.Lease = lc
		}
	}
	return e
}
