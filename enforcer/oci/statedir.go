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
