//go:build linux

package oci

import "github.com/klocklabs/klock/enforcer/oci/statedir"

// A container's state directory is enforcer/oci/statedir's; these are
// its names as this package's callers know them.
const (
	StateRoot       = statedir.Root
	WallFileName    = statedir.WallFileName
	OutcomeFileName = statedir.OutcomeFileName
	AdoptFileName   = statedir.AdoptFileName
	CanaryFileName  = statedir.CanaryFileName
	ReleaseFileName = statedir.ReleaseFileName
)

// Outcome is a container session's end, as the poststop hook writes it.
type Outcome = statedir.Outcome

// StateDir is a container's state directory on the host.
func StateDir(containerID string) string { return statedir.Dir(containerID) }
