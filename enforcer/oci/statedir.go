//go:build linux

package oci

import "path/filepath"

// StateRoot holds one directory per container klock-runtime rewrote:
// klock-stage2 and the wall it reads, bound read-only at /dev/.klock
// inside the container.
const StateRoot = "/run/klock/containers"

// WallFileName is the wall's name in a container's state directory.
const WallFileName = "wall.json"

// StateDir is a container's state directory on the host.
func StateDir(containerID string) string { return filepath.Join(StateRoot, containerID) }

// OutcomeFileName is where the poststop hook says how a container's
// session ended, in its state directory, for klock-runtime's run: runc
// run reports the container's own exit status, and a strict kill that
// landed after the container had exited by itself (the violation was
// read after its last process ended) left that status 0. klock-runtime
// makes the file (root's, 0600; the directory is bound read-only inside
// the container) and holds it open, so the poststop hook's removal of
// the directory does not lose what it wrote.
const OutcomeFileName = "outcome.json"

// Outcome is a container session's end, as the poststop hook writes it.
type Outcome struct {
	Session string `json:"session"`
	// Killed: klock killed the session (strict mode: a violation, or
	// what it could not verify); Interrupted: it was ended from outside
	// (klock kill, a revoked lease), no violation.
	Killed      bool   `json:"killed"`
	Interrupted bool   `json:"interrupted,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Log         string `json:"log,omitempty"`
}
