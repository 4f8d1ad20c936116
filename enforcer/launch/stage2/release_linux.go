//go:build linux

package stage2

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/klocklabs/klock/enforcer/oci/statedir"
	"golang.org/x/sys/unix"
)

// ErrNotReleased: the session never released the container's entrypoint
// (it refused the container, or klockd ended first).
var ErrNotReleased = errors.New("klockd did not release this container")

// openRelease opens the release beside the wall of a gated container
// (ContainerWall.Gated) before the walls go up (Landlock would refuse the
// open afterwards); -1 when the wall is not gated.
func openRelease(w *ContainerWall, wallFile string) (int, error) {
	if !w.Gated {
		return -1, nil
	}
	p := filepath.Join(filepath.Dir(wallFile), statedir.ReleaseFileName)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: its release %s: %v (klock-runtime makes it at create: are klock-runtime and klockd of the same build?)", ErrNotReleased, p, err)
	}
	return fd, nil
}

// awaitContainerRelease waits for the session to finish the container's
// preparation: it holds the release's exclusive flock until then, and
// writes what it decided first (statedir.ReleaseOK, or why it refused).
// The shared lock is the wait; the content is the answer, so a klockd
// that ended (its lock gone with it) without writing "ok" never lets the
// entrypoint run. The descriptor closes at the exec, and the lock with it.
func awaitContainerRelease(fd int) error {
	if fd < 0 {
		return nil
	}
	for {
		err := unix.Flock(fd, unix.LOCK_SH)
		if err == nil {
			break
		}
		if err != unix.EINTR {
			return fmt.Errorf("%w: wait for its release: %v", ErrNotReleased, err)
		}
	}
	var b [4096]byte
	n, err := unix.Pread(fd, b[:], 0)
	if err != nil {
		return fmt.Errorf("%w: read its release: %v", ErrNotReleased, err)
	}
	got := string(b[:max(n, 0)])
	switch {
	case got == statedir.ReleaseOK:
		return nil
	case strings.HasPrefix(got, statedir.ReleaseRefused):
		return fmt.Errorf("%w: it refused it: %s", ErrNotReleased, strings.TrimSpace(strings.TrimPrefix(got, statedir.ReleaseRefused)))
	default:
		return fmt.Errorf("%w: klockd ended before the container's preparation did (klock ps, klockd's log)", ErrNotReleased)
	}
}
