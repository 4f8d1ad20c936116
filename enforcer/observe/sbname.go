package observe

import (
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A path-based metadata call (chmod, chown, utimes, xattrs by name) has no
// fd: the ctime hooks catch the inode it changed and the kernel records
// that inode's path from its filesystem's root at the syscall's exit
// (fKPathSB). That path is the name the operation used. Mapping it into
// the agent's view needs the mount that holds it; these functions do that.

// mountEnt is one line of a mountinfo: the filesystem's device, the root
// of the filesystem the mount shows, and where it is mounted.
type mountEnt struct{ dev, root, mp string }

// mountsOf returns pid's mount table, else the observer's, parsed. pid's is
// cached by its mount namespace: an agent without capabilities cannot
// mount in it, and a namespace of its own (a user namespace) is another
// key.
func (rv *resolver) mountsOf(pid uint32, root *ownRoot) []mountEnt {
	if root != nil {
		return root.mounts(pid)
	}
	ns, _ := os.Readlink(procPath(pid, "ns/mnt"))
	if ns != "" {
		if ms, ok := rv.mounts[ns]; ok {
			return ms
		}
	}
	for _, mi := range []string{procPath(pid, "mountinfo"), "/proc/self/mountinfo"} {
		b, err := os.ReadFile(mi)
		if err != nil {
			continue
		}
		ms := parseMountinfo(string(b))
		if ns != "" && mi != "/proc/self/mountinfo" {
			if len(rv.mounts) >= 64 {
				clear(rv.mounts)
			}
			rv.mounts[ns] = ms
		}
		return ms
	}
	return nil
}

func parseMountinfo(s string) []mountEnt {
	var ms []mountEnt
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		ms = append(ms, mountEnt{dev: f[2], root: unescapeMount(f[3]), mp: unescapeMount(f[4])})
	}
	return ms
}

// sbCandidates are the paths, in the view of the mount table ms, where the
// path rel from the root of the filesystem on device dev can be.
func sbCandidates(ms []mountEnt, dev uint64, rel string) []string {
	want := strconv.FormatUint(uint64(unix.Major(dev)), 10) + ":" + strconv.FormatUint(uint64(unix.Minor(dev)), 10)
	var out []string
	for _, m := range ms {
		if m.dev != want {
			continue
		}
		var rest string
		switch {
		case m.root == "/":
			rest = rel
		case rel == m.root:
			rest = ""
		case strings.HasPrefix(rel, m.root+"/"):
			rest = rel[len(m.root):]
		default:
			continue
		}
		cand := m.mp + rest
		if m.mp == "/" {
			cand = rest
		}
		if cand == "" {
			cand = "/"
		}
		out = append(out, cand)
	}
	return out
}

// sbName is the name a path-based metadata call used, from the kernel's
// path of the inode it changed (rel, at the syscall's exit), when exactly
// one mount in pid's view can hold it. No lookup of the name now is
// involved: pip chmods a temporary file and renames it over its target at
// once, and a name read back after the rename blamed the chmod on the
// target (a strict session killed in 4 of 7 runs). When several mounts
// can hold it (bind mounts of one filesystem: a session's private /tmp is
// a directory of the host's root filesystem bound at /tmp), it is the one
// the call's own name gives (named: its clean absolute path string, "" for
// another), since the kernel and the agent's string then agree on it; else
// ok is false and sbPath decides, by a lookup now. Without it, pip's
// utimensat of a file in a temporary directory it removes at once could
// not be named once the reader came to it late: a strict session killed.
func (rv *resolver) sbName(pid uint32, root *ownRoot, obj ident, rel, named string) (string, bool) {
	return pickSbName(sbCandidates(rv.mountsOf(pid, root), obj.dev, rel), named)
}

// pickSbName is sbName's choice among the candidate names.
func pickSbName(c []string, named string) (string, bool) {
	if len(c) == 1 {
		return c[0], true
	}
	if named != "" && slices.Contains(c, named) {
		return named, true
	}
	return "", false
}

// cleanAbsName is s when it is an absolute path with nothing to clean
// (no "..", ".", "//" or trailing "/"), else "": a name whose text is the
// path it gives, symbolic links aside.
func cleanAbsName(s string) string {
	if len(s) == 0 || s[0] != '/' || path.Clean(s) != s {
		return ""
	}
	return s
}

// sbPath names an object the kernel gave as a path from its filesystem's
// root (fKPathSB) among several candidate mounts: the one whose lstat now
// finds the kernel's inode. ok is false when none does.
func (rv *resolver) sbPath(pid uint32, root *ownRoot, obj ident, rel string) (string, bool) {
	for _, cand := range sbCandidates(rv.mountsOf(pid, root), obj.dev, rel) {
		if root != nil {
			// The candidate is the container's name: looked up in its root.
			if _, id, _, found := root.kresolve(pid, cand, false); found && id == obj {
				return cand, true
			}
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(cand, &st) == nil && statIdent(&st) == obj {
			return cand, true
		}
	}
	return "", false
}

// mounts is the mount table as the container's processes see it: pid's,
// else its init's (once the process is gone), else the namespace's own
// through nshelper (once every process is gone). Never the observer's own
// (its names are the host's), and never cached by namespace: before the
// runtime's pivot_root the same namespace's table reads from the host's
// root. Nil when none can be read: the caller resolves otherwise.
func (r *ownRoot) mounts(pid uint32) []mountEnt {
	for _, p := range []uint32{pid, r.init} {
		if b, err := os.ReadFile(procPath(p, "mountinfo")); err == nil {
			return parseMountinfo(string(b))
		}
	}
	if b := r.nsMountinfo(); b != nil {
		return parseMountinfo(string(b))
	}
	return nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
