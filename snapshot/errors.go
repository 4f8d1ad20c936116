package snapshot

import (
	"errors"
	"fmt"
	"syscall"
)

// Sentinel errors. Every error the package returns for a file-system
// failure is an *Error whose Kind is one of these (or nil for an errno that
// has no class), so callers test with errors.Is: errors.Is(err, ErrNoSpace)
// and errors.Is(err, syscall.ENOSPC) both hold for a full disk.
var (
	// ErrNoSpace: the backup filesystem is full (ENOSPC, EDQUOT).
	ErrNoSpace = errors.New("no space left for the backup")
	// ErrPermission: a path could not be read or written (EACCES, EPERM, EROFS).
	ErrPermission = errors.New("permission denied")
	// ErrExists: Take was given a session id that already has a snapshot.
	ErrExists = errors.New("a snapshot for this session already exists")
	// ErrNotFound: Open was given a session id that has no snapshot.
	ErrNotFound = errors.New("no snapshot for this session")
	// ErrInvalid: bad options (session id, backup root, scopes).
	ErrInvalid = errors.New("invalid snapshot request")
	// ErrCorrupt: a manifest or an object does not match what was recorded.
	ErrCorrupt = errors.New("backup is corrupt")
	// ErrChanged: a file kept changing while it was being backed up.
	ErrChanged = errors.New("file changed while it was being backed up")
	// ErrIncomplete: Restore could not bring some paths back; the Report
	// says which, and running Restore again resumes.
	ErrIncomplete = errors.New("restore incomplete")
)

// Error is a failure on one path. Op says what was being done ("read",
// "copy into the object store", "restore", ...), Path which path failed,
// Err the underlying error (usually a syscall.Errno), Kind the class
// (ErrNoSpace, ErrPermission, ...) and Hint what would fix it.
type Error struct {
	Op   string
	Path string
	Kind error
	Err  error
	Hint string
}

func (e *Error) Error() string {
	s := "snapshot: " + e.Op
	if e.Path != "" {
		s += " " + e.Path
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	} else if e.Kind != nil {
		s += ": " + e.Kind.Error()
	}
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Unwrap exposes both the class and the cause to errors.Is / errors.As.
func (e *Error) Unwrap() []error {
	var out []error
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// kindOf classifies an errno.
func kindOf(err error) error {
	var en syscall.Errno
	if !errors.As(err, &en) {
		return nil
	}
	switch en {
	case syscall.ENOSPC, syscall.EDQUOT:
		return ErrNoSpace
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return ErrPermission
	}
	return nil
}

// pathErr wraps err on path. The hint depends on the class; where names the
// filesystem that needs room (the backup root or the restored tree).
func pathErr(op, path string, err error, where string) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	e := &Error{Op: op, Path: path, Err: unwrapPathError(err), Kind: kindOf(err)}
	switch e.Kind {
	case ErrNoSpace:
		e.Hint = fmt.Sprintf("free space on the filesystem holding %s, remove old backups (klock backups gc --keep N), or put the backups on a larger filesystem", where)
	case ErrPermission:
		e.Hint = "klock must run as root (or as a user who can read every path in the declared scopes and write " + where + "); a read-only filesystem cannot hold backups"
	}
	return e
}

// unwrapPathError strips *os.PathError / *os.LinkError so the message names
// the path once.
func unwrapPathError(err error) error {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return err
}
