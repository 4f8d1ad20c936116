package toolerr

import (
	"errors"
	"fmt"
)

// Class is one of seed 004's error codes.
type Class string

const (
	CapabilityMissing Class = "tool_capability_missing" // the agent has no right to the tool
	Timeout           Class = "tool_timeout"            // the tool ran past its deadline
	Restricted        Class = "tool_restricted"         // forbidden now: disabled, rate-limited, outside permission, a blind retry, pending or denied approval
	InvalidArgs       Class = "tool_invalid_args"       // arguments outside the tool's contract
	SandboxViolation  Class = "tool_sandbox_violation"  // the call broke a rule of its context (a context binding)
	InternalError     Class = "tool_internal_error"     // the tool or the gateway failed
)

// Sentinels, one per class: errors.Is(err, ErrInvalidArgs) holds for every
// *Error of that class.
var (
	ErrCapabilityMissing = errors.New(string(CapabilityMissing))
	ErrTimeout           = errors.New(string(Timeout))
	ErrRestricted        = errors.New(string(Restricted))
	ErrInvalidArgs       = errors.New(string(InvalidArgs))
	ErrSandboxViolation  = errors.New(string(SandboxViolation))
	ErrInternal          = errors.New(string(InternalError))
)

var sentinel = map[Class]error{
	CapabilityMissing: ErrCapabilityMissing,
	Timeout:           ErrTimeout,
	Restricted:        ErrRestricted,
	InvalidArgs:       ErrInvalidArgs,
	SandboxViolation:  ErrSandboxViolation,
	InternalError:     ErrInternal,
}

// Error is the typed failure of one tool call, in the wire shape an agent
// reads. Reason is a short machine code within the class (undeclared,
// disabled, rate_per_run, approval_pending, ...); Check names the pipeline
// stage that produced it.
type Error struct {
	OK        bool   `json:"ok"` // always false
	Class     Class  `json:"error_class"`
	Retryable bool   `json:"retryable"`
	Message   string `json:"message"`
	Reason    string `json:"reason,omitempty"`
	Check     string `json:"check,omitempty"`
	// ApprovalID is set when the call waits for, or was refused by, a human.
	ApprovalID string `json:"approval_id,omitempty"`
}

func (e *Error) Error() string { return string(e.Class) + ": " + e.Message }

// Is matches the class's sentinel.
func (e *Error) Is(target error) bool { return sentinel[e.Class] == target }

// New builds an error of class c; retryable follows the class's default
// (only timeouts and some restrictions are worth retrying).
func New(c Class, reason, format string, a ...any) *Error {
	return &Error{Class: c, Reason: reason, Message: fmt.Sprintf(format, a...), Retryable: c == Timeout}
}

// WithRetry sets Retryable.
func (e *Error) WithRetry(r bool) *Error { e.Retryable = r; return e }

// From returns err as an *Error: itself when it is one (through wrapping),
// otherwise a non-retryable tool_internal_error carrying its message.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var te *Error
	if errors.As(err, &te) {
		return te
	}
	return New(InternalError, "internal", "%v", err)
}

// Valid reports whether c is one of the six classes.
func Valid(c Class) bool { _, ok := sentinel[c]; return ok }
