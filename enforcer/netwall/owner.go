//go:build linux

package netwall

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ownersDir holds one file per wall, locked (flock) by the process that
// set the wall up for as long as the wall stands. The kernel drops the
// lock when that process dies, however it dies: a wall whose file is
// still locked is alive, whatever else Sweep's caller believes. Without
// it a session's wall was swept from under it by another session's start
// (its cgroup empty while it read its counters and closed the wall), and
// so were walls that have no session cgroup at all (netwall's own tests).
const ownersDir = "/run/klock/netwall"

func ownerPath(short string) string { return filepath.Join(ownersDir, short+".owner") }

// holdOwner creates and locks short's owner file. ErrInUse: another live
// wall has that short id.
func holdOwner(short string) (*os.File, error) {
	if err := os.MkdirAll(ownersDir, 0o700); err != nil {
		return nil, fmt.Errorf("netwall: %w", err)
	}
	f, err := os.OpenFile(ownerPath(short), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netwall: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: a live wall already has the short id %s", ErrInUse, short)
		}
		return nil, fmt.Errorf("netwall: lock %s: %w", ownerPath(short), err)
	}
	return f, nil
}

// releaseOwner removes the owner file, then lets go of its lock.
func releaseOwner(f *os.File) {
	if f == nil {
		return
	}
	_ = os.Remove(f.Name())
	f.Close()
}

// ownerHeld reports whether a live process holds short's owner file. A
// file found unlocked is a dead owner's, and is removed.
func ownerHeld(short string) bool {
	f, err := os.OpenFile(ownerPath(short), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = os.Remove(f.Name())
	return false
}

// sweepOwners removes the owner files of dead owners whose walls are gone
// already (their namespace took the link, the table was removed).
func sweepOwners() {
	ents, err := os.ReadDir(ownersDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if short, ok := strings.CutSuffix(e.Name(), ".owner"); ok {
			ownerHeld(short)
		}
	}
}
