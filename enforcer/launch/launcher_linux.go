//go:build linux

package launch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// launcherName is the small stage-2 binary (cmd/klock-stage2) that Spawn
// runs when it is installed beside the running executable.
const launcherName = "klock-stage2"

// selfLauncher re-executes the running binary: stage 2 is its launch.Init.
const selfLauncher = "/proc/self/exe"

// siblingLauncher is klock-stage2's path beside the running executable
// (symlinks resolved), "" when the executable cannot be found.
var siblingLauncher = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), launcherName)
})

// fileID names one version of a file: a reinstall changes the inode or
// the ctime.
type fileID struct {
	dev, ino uint64
	ctime    unix.Timespec
}

// staleLaunchers are launcher files stage 2 refused as another build's;
// Spawn does not try them again.
var staleLaunchers sync.Map // fileID -> struct{}

// openLauncher opens the stage-2 binary to exec: path, or klock-stage2
// beside the executable when path is "". It returns nil when there is none
// or it is unfit, and Spawn re-executes the running binary instead: stage 2
// does the same either way, the small binary only starts sooner.
//
// The file runs as root and then becomes the agent's setup, so whoever can
// change it owns every session: root must own it and its directory, and
// neither may be writable by group or others. The checks are made on the
// descriptors that are then used (the directory's to open the file, the
// file's to exec it through /proc/self/fd), so nothing can be swapped in
// between. A symbolic link is refused.
func openLauncher(path string) (*os.File, fileID) {
	f, id, _ := checkLauncher(path)
	return f, id
}

// checkLauncher is openLauncher, also saying why a launcher is not used.
func checkLauncher(path string) (*os.File, fileID, error) {
	if path == "" {
		if path = siblingLauncher(); path == "" {
			return nil, fileID{}, errors.New("the running executable cannot be found")
		}
	}
	dir := filepath.Dir(path)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fileID{}, fmt.Errorf("%s: %w", dir, err)
	}
	defer unix.Close(dfd)
	if _, ok := rootOnly(dfd, unix.S_IFDIR); !ok {
		return nil, fileID{}, fmt.Errorf("%s is not a directory owned by root and writable by root alone", dir)
	}
	fd, err := unix.Openat(dfd, filepath.Base(path), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fileID{}, fmt.Errorf("%s: %w", path, err)
	}
	st, ok := rootOnly(fd, unix.S_IFREG)
	if !ok || st.Mode&0o111 == 0 {
		unix.Close(fd)
		return nil, fileID{}, fmt.Errorf("%s is not an executable regular file owned by root and writable by root alone (symbolic links are refused)", path)
	}
	id := fileID{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}
	if _, stale := staleLaunchers.Load(id); stale {
		unix.Close(fd)
		return nil, fileID{}, fmt.Errorf("%s is from another build of klock", path)
	}
	return os.NewFile(uintptr(fd), path), id, nil
}

// OpenHelper opens the small binary nshelper's helper processes run
// (klock-stage2, whose main calls nshelper.Init): path, or klock-stage2
// beside the executable when path is "", with the checks stage 2 gets.
// Nil when there is none or it is unfit: the caller re-executes its own
// binary then, which does the same and only starts later. The caller
// closes the file.
func OpenHelper(path string) *os.File {
	f, _ := openLauncher(path)
	return f
}

// LauncherFor says which binary Spawn would run as stage 2 for Spec.Stage2
// path ("" for the default): klock-stage2's path, or "/proc/self/exe"
// with the reason the small launcher is not used (klock doctor shows it).
// Its build is only checked when a session starts.
func LauncherFor(path string) (string, error) {
	f, _, err := checkLauncher(path)
	if err != nil {
		return selfLauncher, err
	}
	f.Close()
	return f.Name(), nil
}

// rootOnly reports whether fd is of type typ, owned by root, and not
// writable by group or others.
func rootOnly(fd int, typ uint32) (unix.Stat_t, bool) {
	var st unix.Stat_t
	ok := unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == typ && st.Uid == 0 && st.Mode&0o022 == 0
	return st, ok
}
