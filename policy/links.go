package policy

import "fmt"

// FollowLinks returns a copy in which every FILE and PROC pattern whose
// path goes through a symbolic link klock trusts is compiled at the
// link's target too, under the same intent (so its use is counted there).
// The kernel names what it opens and executes by the resolved path:
// "PROVIDES PROC:/bin/sh" is an exec of /usr/bin/dash on Debian, and
// without this the declared exec is judged undeclared.
//
// follow returns the path the kernel will resolve p to and true, or false
// when p goes through no link or through one the caller does not trust
// (enforcer/session trusts only links that root made in directories only
// root can write: one the agent could have planted in an earlier session
// must not widen the scope). The pattern's match kind is kept.
func (rs *Ruleset) FollowLinks(follow func(p string) (string, bool)) (*Ruleset, error) {
	links := map[string]string{}
	for _, in := range rs.Intents {
		if in.Object.Type != ObjFile && in.Object.Type != ObjProc {
			continue
		}
		p := in.Object.Path.Path
		if _, done := links[p]; done {
			continue
		}
		if t, ok := follow(p); ok && t != p {
			if t == "" || t[0] != '/' {
				return nil, fmt.Errorf("%w: %s resolves to %q, not an absolute path", ErrInvalidManifest, p, t)
			}
			links[p] = t
		}
	}
	n := *rs
	n.links = links
	if err := n.build(rs.Intents); err != nil {
		return nil, err
	}
	return &n, nil
}

// Links returns the declared paths FollowLinks resolved, and their targets.
func (rs *Ruleset) Links() map[string]string {
	out := make(map[string]string, len(rs.links))
	for k, v := range rs.links {
		out[k] = v
	}
	return out
}

// atLinks is pat and, when FollowLinks resolved its path, pat at the target.
func (rs *Ruleset) atLinks(pat PathPattern) []PathPattern {
	t, ok := rs.links[pat.Path]
	if !ok {
		return []PathPattern{pat}
	}
	return []PathPattern{pat, {Path: t, Match: pat.Match}}
}
