//go:build linux

package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// StateDir makes sure <workdir>/.klock is klock's own: a real directory
// owned by root and writable by nobody else. klock writes backups and logs
// there as root; a workdir belongs to the agent's user, who could otherwise
// plant a symlink named .klock and point root's writes anywhere.
func StateDir(workdir string) (string, error) {
	state := filepath.Join(workdir, ".klock")
	if err := unix.Mkdir(state, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return "", fmt.Errorf("%w: create %s: %v", ErrSetup, state, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(state, &st); err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrSetup, state, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return "", fmt.Errorf("%w: %s is not a directory (a symlink there would redirect klock's writes as root); remove it and run again", ErrSetup, state)
	case int(st.Uid) != os.Geteuid():
		return "", fmt.Errorf("%w: %s is owned by uid %d, not by klock (uid %d); remove it and run again", ErrSetup, state, st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return "", fmt.Errorf("%w: %s is writable by group or others (mode %o); chmod 700 it", ErrSetup, state, st.Mode&0o777)
	}
	return state, nil
}
