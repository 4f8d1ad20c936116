package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// Scope is a region of the file system the agent can change. Every path
// in a scope that exists at Take is recorded (metadata and content), and
// every path in it that exists at Restore but was not recorded is removed.
// Tree scopes cover Path and everything below it; exact scopes cover Path
// only.
type Scope struct {
	Path string `json:"path"`
	Tree bool   `json:"tree"`
}

func (s Scope) String() string {
	if s.Tree {
		return strings.TrimSuffix(s.Path, "/") + "/**"
	}
	return s.Path
}

// covers reports whether p (clean, absolute) is in the scope.
func (s Scope) covers(p string) bool {
	if p == s.Path {
		return true
	}
	return s.Tree && (s.Path == "/" || strings.HasPrefix(p, s.Path+"/"))
}

// make/remove/rename: operations on the parent directory.
var onParent = policy.AccessOf(policy.Deletes, policy.Renames, policy.Provides)

// DeclaredScopes is the narrow reading of the ruleset: the FILE rules that
// carry MUTATES, DELETES, RENAMES or PROVIDES, with "/dir/*" and an exact
// directory read as the whole hierarchy (a rename of a directory moves its
// subtree, and Landlock walls both as hierarchies). PROVIDES scopes are
// recorded with content too: Landlock must grant WRITE_FILE and TRUNCATE
// there so created files can be filled, which makes the files that
// already exist there writable, and restoring them needs their bytes.
func DeclaredScopes(rs *policy.Ruleset) []Scope {
	var out []Scope
	for _, r := range rs.Files {
		if r.Grants&policy.Changing == 0 {
			continue
		}
		p := r.Pattern
		switch {
		case p.Match != policy.MatchExact:
			out = append(out, Scope{Path: p.Path, Tree: true})
		case isDir(p.Path):
			out = append(out, Scope{Path: p.Path, Tree: true})
		default:
			out = append(out, Scope{Path: p.Path})
		}
	}
	return normalize(out)
}

// WallScopes is what the kernel wall (enforcer/launch's Landlock plan)
// actually lets the agent change, which is wider than the declaration:
// creating, removing or renaming a path is a right on its parent
// directory, and a Landlock rule covers the parent's whole hierarchy; a
// path that does not exist yet is walled at its nearest existing
// directory. Rollback must cover the difference (a detected violation
// there is exactly what it exists to undo), so Take uses WallScopes
// unless Options.Scopes says otherwise. Keep this in step with
// enforcer/launch/plan.go (or pass the plan's wall rules as Options.Scopes).
func WallScopes(rs *policy.Ruleset) []Scope {
	out := DeclaredScopes(rs)
	for _, r := range rs.Files {
		g := r.Grants
		if g&policy.Changing == 0 {
			continue
		}
		p := r.Pattern
		info, err := os.Lstat(p.Path)
		switch {
		case err != nil:
			// Missing: only a rule that can create it matters; it is walled
			// at the nearest existing directory.
			if !g.Has(policy.Provides) {
				continue
			}
			target := p.Path
			if p.Match == policy.MatchExact {
				target = filepath.Dir(p.Path)
			}
			out = append(out, Scope{Path: nearestExisting(target), Tree: true})
		case info.IsDir() && p.Match != policy.MatchExact:
			// Removing or renaming the directory itself is on its parent,
			// where the wall grants it (policy.RootRemovable).
			if rs.RootRemovable(p) && g&policy.AccessOf(policy.Deletes, policy.Renames) != 0 {
				out = append(out, Scope{Path: filepath.Dir(p.Path), Tree: true})
			}
		default:
			if g&onParent != 0 && p.Match != policy.MatchChildren {
				out = append(out, Scope{Path: filepath.Dir(p.Path), Tree: true})
			}
		}
	}
	return normalize(out)
}

func isDir(p string) bool {
	info, err := os.Lstat(p)
	return err == nil && info.IsDir()
}

func nearestExisting(p string) string {
	for {
		if isDir(p) || p == "/" {
			return p
		}
		p = filepath.Dir(p)
	}
}

// normalize cleans, sorts and dedupes scopes and drops every scope that a
// different tree scope covers.
func normalize(in []Scope) []Scope {
	seen := map[Scope]bool{}
	var s []Scope
	for _, c := range in {
		c.Path = filepath.Clean(c.Path)
		if !seen[c] {
			seen[c] = true
			s = append(s, c)
		}
	}
	sort.Slice(s, func(i, j int) bool {
		if s[i].Path != s[j].Path {
			return s[i].Path < s[j].Path
		}
		return s[i].Tree && !s[j].Tree
	})
	var out []Scope
	for _, c := range s {
		covered := false
		for _, o := range s {
			if o != c && o.Tree && o.covers(c.Path) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, c)
		}
	}
	return out
}

// checkScopes refuses scopes that cannot be backed up sensibly.
func checkScopes(scopes []Scope) error {
	for _, s := range scopes {
		if !filepath.IsAbs(s.Path) || filepath.Clean(s.Path) != s.Path {
			return fmt.Errorf("%w: scope %q is not a clean absolute path", ErrInvalid, s.Path)
		}
		if s.Tree && s.Path == "/" {
			return fmt.Errorf("%w: scope /** would back up the whole file system; narrow the manifest's MUTATES/DELETES/RENAMES/PROVIDES intents", ErrInvalid)
		}
	}
	return nil
}

func exists(p string) (bool, error) {
	_, err := os.Lstat(p)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}
