//go:build linux

package launch

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinkHops bounds link following, as the kernel's own limit does.
const maxLinkHops = 40

// TrustedLinks returns a resolver for policy.Ruleset.FollowLinks: it
// resolves a path the way the kernel will, through links only root could
// have made (PlanLandlock walls no path that goes through any other
// link): each link is owned by root and sits in a root-owned directory
// that neither group nor others may write, and none is at or below a
// path in agentOwned, whoever owns it (the workdir is the agent's, and an
// agent run as root, --user 0, makes root-owned links there). The
// resolver returns the resolved path and true when it followed at least
// one link and trusted them all. A link the agent could have planted
// returns false: the declaration stays at its own path, so an access
// through the link is judged at its target, which was not declared,
// instead of silently widening the scope. Components that do not exist
// yet are kept as they are. It remembers what it looked at: a ruleset's
// paths share most of their prefixes.
func TrustedLinks(agentOwned ...string) func(p string) (string, bool) {
	seen := map[string]*unix.Stat_t{} // nil: does not exist
	lstat := func(p string) *unix.Stat_t {
		if st, ok := seen[p]; ok {
			return st
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			seen[p] = nil
			return nil
		}
		seen[p] = &st
		return &st
	}
	agents := func(link string) bool {
		for _, a := range agentOwned {
			if a = filepath.Clean(a); link == a || strings.HasPrefix(link, a+"/") {
				return true
			}
		}
		return false
	}
	return func(p string) (string, bool) { return followTrusted(p, lstat, agents) }
}

// followTrusted resolves p with lstat; it trusts no link agents claims.
func followTrusted(p string, lstat func(string) *unix.Stat_t, agents func(string) bool) (string, bool) {
	rest := strings.Split(strings.Trim(filepath.Clean(p), "/"), "/")
	cur, followed, hops := "/", false, 0
	for len(rest) > 0 {
		comp := rest[0]
		rest = rest[1:]
		if comp == "" || comp == "." {
			continue
		}
		if comp == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, comp)
		st := lstat(next)
		if st == nil {
			return filepath.Join(append([]string{next}, rest...)...), followed
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			cur = next
			continue
		}
		if hops++; hops > maxLinkHops || agents(next) || !trustedLink(cur, st, lstat) {
			return "", false
		}
		target, err := os.Readlink(next)
		if err != nil || inProc(cur) || inProc(target) {
			// /proc/self and /dev/fd name a different place in every
			// process: klock's resolution of them is not the agent's.
			return "", false
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
		followed = true
	}
	return cur, followed
}

// trustedLink: the link (st) and its directory belong to root, and only
// root may write that directory.
func trustedLink(dir string, st *unix.Stat_t, lstat func(string) *unix.Stat_t) bool {
	if st.Uid != 0 {
		return false
	}
	d := lstat(dir) // dir has no link in it: resolution got here through real directories
	return d != nil && d.Mode&unix.S_IFMT == unix.S_IFDIR && d.Uid == 0 && d.Mode&0o022 == 0
}

func inProc(p string) bool { return p == "/proc" || strings.HasPrefix(p, "/proc/") }
