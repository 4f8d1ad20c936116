//go:build linux

package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/klocklabs/klock/policy"
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

// lockFile is the lock one session holds on its workdir (in StateDir).
const lockFile = "session.lock"

// lockWorkdir takes the workdir's session lock (flock on
// <state>/session.lock, so a klock that dies frees it) for session id, or
// fails with ErrWorkdirBusy naming the session that holds it. Two
// sessions on one workdir cannot both be undone: a strict kill restores
// the whole workdir, the other's work with it. release frees the lock.
func lockWorkdir(state, id string) (release func(), err error) {
	p := filepath.Join(state, lockFile)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSetup, p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(p)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			who := strings.TrimSpace(string(holder))
			if who == "" {
				who = "another session"
			}
			return nil, fmt.Errorf("%w: %s holds %s (one session per workdir: a strict kill restores the whole workdir, the other session's work with it). Wait for it to end, or end it (klock kill, or its klock run)", ErrWorkdirBusy, who, filepath.Dir(state))
		}
		return nil, fmt.Errorf("%w: lock %s: %v", ErrSetup, p, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("session %s (klock pid %d)\n", id, os.Getpid())), 0)
	return func() { f.Close() }, nil
}

// writesWorkdir says whether rs lets the agent change anything in its
// workdir, where a strict kill restores everything: only then do two
// sessions on it conflict (a tool gateway's plugin calls share a workdir
// that holds klock's state alone, and run side by side).
func writesWorkdir(rs *policy.Ruleset) bool {
	wd := strings.TrimSuffix(rs.Workdir, "/")
	if wd == "" {
		return false
	}
	for _, r := range rs.Files {
		p := r.Pattern.Path
		inside := p == wd || strings.HasPrefix(p, wd+"/")
		covers := r.Pattern.Match == policy.MatchSubtree && (p == "/" || strings.HasPrefix(wd, p+"/"))
		if r.Grants&policy.Changing != 0 && (inside || covers) {
			return true
		}
	}
	return false
}
