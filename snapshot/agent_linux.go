//go:build linux

package snapshot

import (
	"slices"

	"golang.org/x/sys/unix"
)

// agent is who the session's agent runs as: a uid and its groups, without
// capabilities (klock's launch drops them all), so the kernel's file
// permission checks are all that lets it change a path.
type agent struct {
	uid  uint32
	gids []uint32
}

// may says whether the agent's class (owner, group, other: the first that
// matches, as the kernel checks) has perm (unix.W_OK, unix.X_OK) on st.
func (a *agent) may(st *unix.Stat_t, perm uint32) bool {
	switch {
	case st.Uid == a.uid:
		return st.Mode&(perm<<6) != 0
	case slices.Contains(a.gids, st.Gid):
		return st.Mode&(perm<<3) != 0
	}
	return st.Mode&perm != 0
}

// reach is what the agent can do with a directory, as Take's walk goes down.
type reach struct {
	// movable: the agent can rename or remove this directory or one above
	// it in the scope, taking everything below with it.
	movable bool
	// owned: it can chmod the directory, so it can add and remove entries.
	owned bool
	// edit: it can add and remove entries (write and search).
	edit bool
	// sticky: only an entry's owner (or the directory's) may remove it.
	sticky bool
}

// reachOf is what the agent can do with the directory st, given what it can
// do with its parent.
func (a *agent) reachOf(p string, st *unix.Stat_t, parent reach) reach {
	owned := st.Uid == a.uid
	acl := hasACL(p, st)
	return reach{
		movable: parent.movable || parent.removes(st.Uid == a.uid),
		owned:   owned,
		edit:    owned || acl || a.may(st, unix.W_OK) && a.may(st, unix.X_OK),
		sticky:  st.Mode&unix.S_ISVTX != 0,
	}
}

// removes says whether the agent can unlink or rename an entry of this
// directory (owns: the agent owns the entry).
func (r reach) removes(owns bool) bool {
	return r.owned || r.edit && (!r.sticky || owns)
}

// canChange says whether the agent could change p (st) in any way: its
// content, metadata, name or existence. It can when it owns p (chmod,
// utimes, xattrs), may write it, may remove or rename it from its
// directory, or can move a directory above it. A POSIX ACL may grant it
// more than the mode says: a path with one counts as changeable.
func (a *agent) canChange(p string, st *unix.Stat_t, parent reach) bool {
	owns := st.Uid == a.uid
	switch {
	case owns, parent.movable, parent.removes(owns):
		return true
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return false // a symlink's mode is always 0777 and means nothing
	case a.may(st, unix.W_OK):
		return true
	}
	return hasACL(p, st)
}

// canEnter says whether the agent can reach anything below directory st:
// search permission, or ownership (chmod gives it).
func (a *agent) canEnter(p string, st *unix.Stat_t) bool {
	return st.Uid == a.uid || a.may(st, unix.X_OK) || hasACL(p, st)
}

// hasACL says whether p carries a POSIX access ACL, which may grant a
// named user or group more than the mode bits show. Symlinks have none.
// The answer is remembered per inode and change time (aclSeen): setting
// or removing an ACL changes the inode's ctime, so a remembered answer
// for the same (device, inode, ctime) is still true, and a backup walk of
// a large declared tree (/usr/bin) asks the kernel once per file per
// process rather than once per session. Only for a ctime at least a
// second old: a file system's timestamps are coarse (a jiffy), so an ACL
// set in the same tick as the change we saw would keep its ctime (git's
// "racily clean" index entries, the same rule).
func hasACL(p string, st *unix.Stat_t) bool {
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return false
	}
	k := aclKey{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}
	if has, ok := aclSeen.get(k); ok {
		return has
	}
	n, err := unix.Lgetxattr(p, "system.posix_acl_access", nil)
	has := err == nil && n > 0
	if settled(st.Ctim) && (err == nil || err == unix.ENODATA || err == unix.ENOTSUP) {
		aclSeen.put(k, has) // a transient failure is asked again
	}
	return has
}
