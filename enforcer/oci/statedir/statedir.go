//go:build linux

// Package statedir owns the layout of a container's klock state directory
// on the host (/run/klock/containers/<id>), which klock-runtime makes at
// create and the OCI hooks read and remove: klock-stage2 and the wall it
// reads (bound read-only at /dev/.klock inside the container), the adopt
// request klock-runtime prepared, and the outcome the poststop hook
// writes. It imports nothing of klock's, so the light klock front serves
// the hooks with it.
//
// It has no errors of its own: callers wrap the file system's.
package statedir

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
)

// Root holds one directory per container klock-runtime rewrote.
const Root = "/run/klock/containers"

// WallFileName is the wall's name in a container's state directory.
const WallFileName = "wall.json"

// AdoptFileName is the adopt request klock-runtime prepared at create
// (root's, 0600; the directory is bound read-only inside the container):
// the manifest it checked and the spec's mappings, as the createRuntime
// hook sends them to klockd with the init's pid. A container without one
// (hook-only mode, a hooks.d file) is prepared by the hook itself.
const AdoptFileName = "adopt.json"

// CanaryFileName is the canaries' report pipe (a FIFO klock-runtime makes
// at create, root's, 0622): the entrypoint's klock-stage2 writes what the
// walls did with its canaries there, through the read-only bind (which
// does not apply to a pipe), and the container's session in klockd reads
// it from the host.
const CanaryFileName = "canary"

// ReleaseFileName is the entrypoint's release (a file klock-runtime makes
// empty at create, root's, 0644): the session holds an exclusive flock
// of it while it finishes the container's preparation after the
// createRuntime hook returned, and writes "ok" (ReleaseOK) or why it
// refused (ReleaseRefused) before it lets go. Each klock-stage2 in the
// container waits for a shared flock, then reads it: anything but "ok"
// (nothing at all: klockd ended first) and the entrypoint never runs.
const ReleaseFileName = "release"

// What the session writes into ReleaseFileName.
const (
	ReleaseOK      = "ok\n"
	ReleaseRefused = "refused: "
)

// Dir is a container's state directory on the host.
func Dir(containerID string) string { return filepath.Join(Root, containerID) }

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

// The annotation klock-runtime's rewrite sets on the specs it rewrote
// (enforcer/oci.Rewrite): a container that carries it has a state
// directory klock-runtime made at its create.
const (
	AnnotationRuntime = "io.klock.runtime"
	RuntimeFull       = "klock-runtime"
)

// WriteOutcome tells klock-runtime's run how container id's session
// ended, when it waits for it: it made the outcome file (nothing is
// created here: a container started by another runtime, or by create and
// start, has nobody to read it) and holds it open past the state
// directory's removal.
func WriteOutcome(id string, o Outcome) {
	f, err := os.OpenFile(filepath.Join(Dir(id), OutcomeFileName), os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := json.Marshal(o)
	_, _ = f.Write(b)
}
