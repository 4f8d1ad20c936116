package decide

import (
	"github.com/klocklabs/klock/policy"
)

// Action is what the session must do about one event.
type Action uint8

const (
	// ActionAllow: the operation is inside the scope (or, for Lost in
	// permissive mode, recorded); nothing to do.
	ActionAllow Action = iota
	// ActionBlocked: a violation the kernel already refused; record it and
	// go on (permissive mode only: strict turns every violation into
	// ActionKill).
	ActionBlocked
	// ActionKill: strict mode; kill the whole cgroup, then roll back from
	// the pre-flight backup, and report Verdict.Err (or Reason).
	ActionKill
	// ActionAmended: permissive mode; the scope was amended with a lease
	// intent (Verdict.Lease) and the operation proceeds.
	ActionAmended
	// ActionLeaseDenied: permissive mode; the amendment was not granted
	// (WithAmendGate: another holder's lease conflicts, Verdict.LeaseError
	// says whose). The scope does not grow: an operation a wall refused
	// (Verdict.Blocked) stays refused, one a detect-only backend saw has
	// taken effect and stays a violation on record.
	ActionLeaseDenied
)

var actionNames = [...]string{"allow", "violation-blocked", "violation-kill", "amended", "violation-lease-denied"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(?)"
}

// MarshalText renders the action name.
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads an action name.
func (a *Action) UnmarshalText(b []byte) error {
	for i, n := range actionNames {
		if string(b) == n {
			*a = Action(i)
			return nil
		}
	}
	return &UnknownActionError{Name: string(b)}
}

// UnknownActionError is returned when decoding an unknown action name.
type UnknownActionError struct{ Name string }

func (e *UnknownActionError) Error() string {
	return "unknown action " + e.Name + "; want allow, violation-blocked, violation-kill, amended or violation-lease-denied"
}

// Verdict is the engine's answer for one event or loss.
type Verdict struct {
	Action Action
	// Triple is the triple decided: the violating one when the event's
	// main triple or its Extra is outside the scope, else the main triple.
	Triple policy.Triple
	// Intent is the intent that allowed the triple (nil for a violation
	// before amendment, for a created-file allowance and for Lost).
	Intent *policy.Intent
	// Created is true when the triple was allowed because the session
	// created the file itself (see created.go).
	Created bool
	// Unnamed is true when the operation was on a file with no name left
	// (event.Event.Unnamed): allowed, whatever the scope.
	Unnamed bool
	// WallExact is true when the operation's name could not be read and
	// the wall let it through exactly as declared (WithExactWall).
	WallExact bool
	// Err is the KLIS-6 §3.1 error for a violation, nil otherwise.
	Err *policy.ScopeViolationError
	// Blocked is true when the kernel refused the operation before any effect.
	Blocked bool
	// Refused is true when klock's own wall refused an operation the
	// scope allows (WithWall): recorded as a Refusal.
	Refused bool
	// Lease is the intent added to the scope (ActionAmended, ActionBlocked
	// in permissive mode), nil otherwise.
	Lease *policy.Intent
	// LeaseError says why a permissive amendment was not granted
	// (ActionLeaseDenied): the conflicting lease, its holder and object.
	LeaseError string
	// Reason explains a kill that has no ScopeViolationError (lost events).
	Reason string
	// First is true on the first ActionKill verdict of the session: the one
	// the session must act on.
	First bool
}

// Violation reports whether the verdict is a scope violation.
func (v Verdict) Violation() bool { return v.Err != nil }

// Message is the line to print for a kill or violation: the
// ScopeViolationError text, or the reason for a kill without one.
func (v Verdict) Message() string {
	switch {
	case v.Err != nil:
		return v.Err.Error()
	case v.Reason != "":
		return v.Reason
	}
	return ""
}
