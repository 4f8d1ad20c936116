//go:build linux

package session

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/policy"
)

// provideDirs creates each directory that a "PROVIDES FILE:dir/**" (or
// "dir/*") rule names inside the workdir and that does not exist yet (with
// the missing directories above it, inside the workdir), owned by the
// agent, before the wall is planned. A
// Landlock rule attaches to an existing file: without the directory the
// rule goes on the nearest existing one, and PROVIDES there (make, write,
// truncate) would make every existing file beside it writable, a widening
// only detection covers. The declaration says the agent may create dir
// and everything below it; klock making the empty directory first walls it
// exactly. It returns what it made. Outside the workdir nothing is made
// (the directory's parent is not the agent's).
//
// Each directory is made relative to a descriptor of its parent opened
// without following any link, and chowned through it, so a path swapped
// for a link meanwhile cannot make klock create or chown anything
// elsewhere.
func provideDirs(rs *policy.Ruleset, owner *launch.Credential) ([]string, error) {
	wd := strings.TrimSuffix(rs.Workdir, "/")
	if wd == "" {
		return nil, nil
	}
	var dirs []policy.PathPattern
	for _, r := range rs.Files {
		if r.Grants.Has(policy.Provides) {
			dirs = append(dirs, r.Pattern)
		}
	}
	// A PROC directory the agent may fill (PROVIDES FILE there too: a
	// venv's bin/, a build's out/) is made as well: its execute rule
	// would otherwise attach to nothing, and the programs the agent makes
	// there could not run.
	for _, r := range rs.Exec {
		if rs.Allows(policy.FileTriple(policy.Provides, r.Pattern.Path)).Allowed {
			dirs = append(dirs, r.Pattern)
		}
	}
	state := filepath.Join(wd, ".klock")
	var made []string
	for _, pat := range dirs {
		p := pat.Path
		if pat.Match == policy.MatchExact || !strings.HasPrefix(p, wd+"/") || p == state || strings.HasPrefix(p, state+"/") {
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); !errors.Is(err, unix.ENOENT) {
			continue // exists (or cannot be looked at: the plan says what it makes of that)
		}
		// The missing directories from the nearest existing one inside
		// the workdir down to p (a/ for a/b/** when neither exists).
		var missing []string
		for q := p; q != wd && strings.HasPrefix(q, wd+"/"); q = filepath.Dir(q) {
			if err := unix.Lstat(q, &st); !errors.Is(err, unix.ENOENT) {
				break
			}
			missing = append(missing, q)
		}
		for i := len(missing) - 1; i >= 0; i-- {
			q := missing[i]
			ok, err := mkdirBeneath(filepath.Dir(q), filepath.Base(q), owner)
			if err != nil {
				return made, fmt.Errorf("%w: create the declared directory %s: %v", ErrSetup, q, err)
			}
			if !ok {
				break // its parent is not a plain directory: the plan says what it makes of that
			}
			made = append(made, q)
		}
	}
	return made, nil
}

// mkdirBeneath makes dir/name (0755) owned by owner (else by dir's owner),
// resolving dir without links. It returns false, nil when dir does not
// exist or is not a plain directory path.
func mkdirBeneath(dir, name string, owner *launch.Credential) (bool, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	uid, gid := -1, -1
	if owner != nil {
		uid, gid = int(owner.UID), int(owner.GID)
	} else {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return false, err
		}
		uid, gid = int(st.Uid), int(st.Gid)
	}
	if err := unix.Mkdirat(fd, name, 0o755); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return false, nil
		}
		return false, err
	}
	if err := unix.Fchownat(fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return true, err
	}
	return true, nil
}
