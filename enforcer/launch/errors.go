package launch

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
)

var (
	// ErrNotRoot: launching a session needs root (namespaces, clone into a
	// cgroup, dropping to another uid).
	ErrNotRoot = errors.New("launch: needs root (run klock with sudo)")
	// ErrNoLandlock: the kernel has no usable Landlock, so there is no file
	// wall. The launcher never runs an agent without one.
	ErrNoLandlock = errors.New("launch: the kernel has no usable Landlock")
	// ErrUnexpressible: a declared rule has no Landlock scope that would not
	// open far more than was declared.
	ErrUnexpressible = errors.New("launch: rule cannot be walled by Landlock")
	// ErrRootNotExplicit: the agent would run as uid 0 but Spec.User does
	// not say AllowRoot.
	ErrRootNotExplicit = errors.New("launch: refusing to run the agent as root without an explicit request")
	// ErrNoUser: no uid to run the agent as could be determined.
	ErrNoUser = errors.New("launch: no user to run the agent as")
	// ErrBadSpec: the Spec is incomplete or inconsistent.
	ErrBadSpec = errors.New("launch: invalid spec")
	// ErrSetup: stage 2 failed before exec; the agent never ran. The error is
	// a *StageError.
	ErrSetup = errors.New("launch: session setup failed before the agent started")
	// ErrWallNotEnforcing: a wall let its canary through (Spec.Canaries,
	// strict): the agent never ran. The error is a *StageError whose
	// message names the canary and the kernel.
	ErrWallNotEnforcing = errors.New("launch: a wall is not enforcing")
)

// StageError is a failure inside stage 2, reported over the status pipe
// before the agent's first instruction. errors.Is matches ErrSetup and the
// system call's errno (e.g. syscall.ENOENT).
type StageError struct {
	Step  string        `json:"step"`  // "landlock", "mount", "exec", ...
	Msg   string        `json:"msg"`   // e.g. "path /srv/x: no such file or directory"
	Errno syscall.Errno `json:"errno"` // 0 when there is none
	// Path is the program a failed exec named.
	Path string `json:"path,omitempty"`
	// Hint says what would fix it, when klock can tell (ExecHint).
	Hint string `json:"-"`
}

func (e *StageError) Error() string {
	if e.Hint != "" {
		return fmt.Sprintf("launch: %s: %s. %s", e.Step, e.Msg, e.Hint)
	}
	return fmt.Sprintf("launch: %s: %s", e.Step, e.Msg)
}

// Is makes errors.Is(err, ErrSetup) true, and errors.Is(err,
// ErrWallNotEnforcing) for a canary a wall let through.
func (e *StageError) Is(target error) bool {
	return target == ErrSetup || target == ErrWallNotEnforcing && e.Step == stage2.StepCanary
}

// Unwrap exposes the errno.
func (e *StageError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}
