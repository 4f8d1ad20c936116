//go:build linux

package session

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/klocklabs/klock/enforcer/oci"
	"github.com/klocklabs/klock/enforcer/oci/statedir"
	"golang.org/x/sys/unix"
)

// releaseGate holds a container's entrypoint (every klock-stage2 in it)
// while the session finishes its preparation after the createRuntime hook
// returned: the runtime sets the container up meanwhile, instead of
// waiting for the backup, the network programs and the log. The session
// holds the release's exclusive flock from before the hook returns and
// writes its answer before it lets go (statedir.ReleaseFileName).
type releaseGate struct{ f *os.File }

// openReleaseGate takes the release of c, which klock-runtime made in its
// state directory; nil, nil when there is none (hook-only mode, or a
// state directory made without one): the hook then returns only once the
// container is ready, as before.
func openReleaseGate(c *Container) (*releaseGate, error) {
	if c.WallFile == "" {
		return nil, nil
	}
	p := filepath.Join(filepath.Dir(c.WallFile), oci.ReleaseFileName)
	f, err := os.OpenFile(p, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: container %s: its release: %v", ErrSetup, c.ID, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: container %s: its release %s is held by another session: %v", ErrSetup, c.ID, p, err)
	}
	// Empty while held: a stage 2 that reads it before the answer (it
	// cannot, while the lock is held) would find no "ok".
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: container %s: its release: %v", ErrSetup, c.ID, err)
	}
	return &releaseGate{f: f}, nil
}

// open lets the container's entrypoint go.
func (g *releaseGate) open() error { return g.answer(statedir.ReleaseOK) }

// refuse tells the container's stage 2 why its entrypoint never runs.
func (g *releaseGate) refuse(why error) {
	msg := strings.ReplaceAll(why.Error(), "\n", " ")
	if len(msg) > 3900 {
		msg = msg[:3900] + "..."
	}
	_ = g.answer(statedir.ReleaseRefused + msg + "\n")
}

// answer writes the answer and drops the lock; only the first counts.
func (g *releaseGate) answer(s string) error {
	if g == nil || g.f == nil {
		return nil
	}
	f := g.f
	g.f = nil
	defer f.Close() // the lock goes with it
	if _, err := f.WriteAt([]byte(s), 0); err != nil {
		return fmt.Errorf("%w: release the container: %v", ErrSetup, err)
	}
	return nil
}
