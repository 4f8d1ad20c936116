package decide

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// File families. A tool that keeps a file often keeps others beside it
// that it makes, changes and removes from run to run: SQLite's -wal, -shm
// and -journal, a lock file, the temporary file of an atomic write, a
// numbered temporary directory it rotates. One run sees one moment of
// that life (the WAL made and removed); the next finds what an earlier,
// killed run left (the WAL there, to change). A manifest learned from the
// moment kills the next run. So what a run shows of a named family is
// learned as the operations the family needs, not only those seen.
//
// Only the families in fileFamilies, each recognised by its names and by
// evidence of the tool at work (the database opened, the lock made, the
// temporary renamed over its target): never a blanket widening. Each
// family's needs are exact paths where the names are stable, a
// directory's children or subtree only where the names change from run to
// run and the directory is one a family may be declared in (familyArea).

// familySeen is what the run did to files, by path: the predicates that
// took effect at least once.
type familySeen map[string]policy.Access

func (s familySeen) has(p string, pr policy.Predicate) bool { return s[p].Has(pr) }

// fileFamily is one named family: find returns what the family needs,
// given what the run did.
type fileFamily struct {
	name string
	find func(s familySeen, workdir string) []learnObs
}

// fileFamilies is every family the learner knows. Adding one is adding a
// row here.
var fileFamilies = []fileFamily{
	{"SQLite companions", sqliteFamily},
	{"lock files", lockFamily},
	{"atomic-write temporaries", atomicWriteFamily},
	{"numbered temporary directories", numberedDirFamily},
}

// familySeen collects what the run did to files. Call with e.mu held.
func (e *Engine) familySeen() familySeen {
	s := familySeen{}
	for t, o := range e.obs {
		if t.Type == policy.ObjFile && o.Count > o.Failed && absClean(t.Path) && !o.Tmpfile {
			s[t.Path] |= policy.AccessOf(t.Predicate)
		}
	}
	return s
}

// familyNeeds is what every family the run showed needs, in table order.
func familyNeeds(s familySeen, workdir string) []learnObs {
	var out []learnObs
	for _, f := range fileFamilies {
		out = append(out, f.find(s, workdir)...)
	}
	return out
}

// withImplied merges what families (and a private /tmp) imply into
// need. A triple need has already takes the family's scope (familyWins);
// a triple base (the manifest as declared) allows is not learned again.
// base may be nil.
func withImplied(need, fam []learnObs, base *policy.Ruleset) []learnObs {
	at := map[policy.Triple][]int{}
	for i, o := range need {
		at[o.t] = append(at[o.t], i)
	}
	for _, f := range fam {
		if is := at[f.t]; len(is) > 0 {
			for _, i := range is {
				if familyWins(need[i].scope, f.scope) {
					need[i].scope, need[i].note = f.scope, f.note
				}
			}
			continue
		}
		if base != nil && base.Allows(f.t).Allowed {
			continue
		}
		at[f.t] = append(at[f.t], len(need))
		need = append(need, f)
	}
	return need
}

// familyWins: a family's scope replaces the one a need has: an exact one
// always (the family knows the name is stable: a database's WAL is not a
// temporary file of random name, so its removal is not declared on its
// whole directory, ~/.codex/*), a wider one over an exact one (the family
// knows the name changes); a pattern found otherwise (a directory the run
// made, ownScopes) stays.
func familyWins(cur, fam policy.PathPattern) bool {
	return cur.Path == "" || fam.Match == policy.MatchExact || cur.Match == policy.MatchExact
}

// familyObs is one need of a family on p, declared on scope.
func familyObs(pr policy.Predicate, p string, scope policy.PathPattern, note string) learnObs {
	return learnObs{t: policy.FileTriple(pr, p), syscall: "family", scope: scope, note: note, family: true}
}

func exactPattern(p string) policy.PathPattern {
	return policy.PathPattern{Path: p, Match: policy.MatchExact}
}

// familyArea: a family whose names change from run to run may be
// declared on dir's children or subtree: a temporary directory, the
// workdir's subdirectories, a tool's directory (storeArea: not the
// system's trees); never the workdir itself nor above it (its own rules
// stay on it), never a home directory itself (~/.ssh is there too).
func familyArea(dir, workdir string) bool {
	if (workdir != "" && dir == workdir) || aboveWorkdir(dir, workdir) || homeDir(dir) {
		return false
	}
	return policy.InTmp(dir) || storeArea(dir)
}

// sqliteSuffixes name a database's companions: its write-ahead log, the
// log's shared-memory index, its rollback journal (sqlite.org/tempfiles.html).
var sqliteSuffixes = []string{"-wal", "-shm", "-journal"}

// sqliteFamily: a companion of a database the run opened. SQLite makes
// each companion when a connection needs it and removes it when the last
// one closes; a connection that dies leaves it, and the next opens it,
// changes it and removes it. Every companion is made, changed and
// removed (exact paths: the names are the database's); the database
// itself is changed when the run wrote to it, or made it, or wrote a log
// (a checkpoint, or the next open's recovery, writes the log into it).
func sqliteFamily(s familySeen, _ string) []learnObs {
	var out []learnObs
	done := map[string]bool{}
	for p := range s {
		db := sqliteDB(p)
		if db == "" || done[db] || s[db] == 0 {
			continue
		}
		done[db] = true
		note := fmt.Sprintf("learned: SQLite's companions of %s (-wal, -shm, -journal: made, changed and removed from run to run, left by a run that died); ", path.Base(db))
		wrote := s.has(db, policy.Mutates) || s.has(db, policy.Provides)
		for _, suf := range sqliteSuffixes {
			c := db + suf
			wrote = wrote || (suf != "-shm" && (s.has(c, policy.Mutates) || s.has(c, policy.Provides)))
			for _, pr := range []policy.Predicate{policy.Provides, policy.Mutates, policy.Deletes} {
				out = append(out, familyObs(pr, c, exactPattern(c), note))
			}
		}
		if wrote {
			out = append(out, familyObs(policy.Mutates, db, exactPattern(db), note))
		}
	}
	return out
}

// sqliteDB is the database p is a companion of, or "".
func sqliteDB(p string) string {
	for _, suf := range sqliteSuffixes {
		if db, ok := strings.CutSuffix(p, suf); ok && path.Base(db) != "" && !strings.HasSuffix(db, "/") {
			return db
		}
	}
	return ""
}

// lockFamily: a lock file the run made (X.lock, .X.lock, X.lck). Its tool
// makes it, may write its pid in it, and removes it; one a killed run
// left is there for the next run to open and remove. Exact: the name is
// the locked file's.
func lockFamily(s familySeen, _ string) []learnObs {
	var out []learnObs
	for p, a := range s {
		b := path.Base(p)
		if !a.Has(policy.Provides) || !lockName(b) {
			continue
		}
		note := fmt.Sprintf("learned: a lock file, %s (made and removed from run to run, left by a run that died); ", b)
		for _, pr := range []policy.Predicate{policy.Provides, policy.Mutates, policy.Deletes} {
			out = append(out, familyObs(pr, p, exactPattern(p), note))
		}
	}
	return out
}

// lockName: X.lock, .X.lock or X.lck, X not empty.
func lockName(b string) bool {
	for _, suf := range []string{".lock", ".lck"} {
		if x, ok := strings.CutSuffix(b, suf); ok {
			return strings.TrimPrefix(x, ".") != ""
		}
	}
	return false
}

// atomicWriteFamily: a temporary file renamed over a file beside it, the
// way tools write a file whole: X.tmp, X.tmp.<digits>, .X.<random>. The
// temporary is made and renamed; X is replaced (changed), also when this
// run made it: the next run finds it. A name with a random part is
// declared on its directory's children where familyArea allows (the next
// run picks another name), else exact; X.tmp is exact, and also changed
// and removed (a run that died left it).
func atomicWriteFamily(s familySeen, workdir string) []learnObs {
	var out []learnObs
	for p, a := range s {
		if !a.Has(policy.Renames) {
			continue
		}
		dir := parentDir(p)
		target, random := atomicTarget(path.Base(p))
		x := path.Join(dir, target)
		if target == "" || !(s.has(x, policy.Mutates) || s.has(x, policy.Provides)) {
			continue
		}
		scope := exactPattern(p)
		if random && familyArea(dir, workdir) {
			scope = policy.PathPattern{Path: dir, Match: policy.MatchChildren}
		}
		note := fmt.Sprintf("learned: the temporary file of an atomic write of %s, renamed over it (made, renamed or removed from run to run); ", target)
		// On a directory's children only what the run did: a removal
		// there would reach every file of the directory.
		preds := []policy.Predicate{policy.Provides, policy.Renames}
		if scope.Match == policy.MatchExact {
			preds = append(preds, policy.Mutates, policy.Deletes)
		}
		for _, pr := range preds {
			out = append(out, familyObs(pr, p, scope, note))
		}
		out = append(out, familyObs(policy.Mutates, x, exactPattern(x), note))
	}
	return out
}

// atomicTarget is the file an atomic write's temporary name is for, and
// whether the name has a part that changes from run to run; "" when the
// name is not one.
func atomicTarget(b string) (target string, random bool) {
	if x, ok := strings.CutSuffix(b, ".tmp"); ok && x != "" {
		return x, false
	}
	if i := strings.LastIndex(b, ".tmp."); i > 0 && digits(b[i+len(".tmp."):]) {
		return b[:i], true
	}
	if rest, ok := strings.CutPrefix(b, "."); ok {
		if i := strings.LastIndexByte(rest, '.'); i > 0 && alnum(rest[i+1:]) && len(rest)-i-1 >= 6 {
			return rest[:i], true
		}
	}
	return "", false
}

func digits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

func alnum(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_") == ""
}

// numberedDirFamily: temporary directories a tool numbers or names at
// random beside each other and rotates (pytest's pytest-<N>, removed or
// renamed away when there are three newer; Python's mkdtemp tmpXXXXXXXX).
// The next run's is another name in the same directory: the family is
// declared on the parent's subtree, with the rights the run used in it
// and the rotation's (removing, renaming). Evidence: the run made,
// removed or renamed such a directory, or worked in two of them.
func numberedDirFamily(s familySeen, workdir string) []learnObs {
	dirs := map[string]map[string]bool{} // parent -> numbered directories the run touched
	under := map[string][]string{}       // parent -> paths the run touched in them
	for p := range s {
		for d := p; d != "/"; d = parentDir(d) {
			if !numberedDir(path.Base(d)) {
				continue
			}
			parent := parentDir(d)
			if dirs[parent] == nil {
				dirs[parent] = map[string]bool{}
			}
			dirs[parent][d] = true
			under[parent] = append(under[parent], p)
		}
	}
	var out []learnObs
	for parent, ds := range dirs {
		if !familyArea(parent, workdir) || !rotated(s, ds) {
			continue
		}
		scope := policy.PathPattern{Path: parent, Match: policy.MatchSubtree}
		note := fmt.Sprintf("learned: numbered temporary directories in %s (%s: the next run's has another name, older ones are removed); ", path.Base(parent), strings.Join(sortedKeys(ds, path.Base), ", "))
		// The rotation's rights on each directory, and what the run did
		// in them; all on the parent's subtree.
		used := policy.AccessOf(policy.Deletes, policy.Renames)
		for _, p := range under[parent] {
			used |= s[p]
		}
		for _, pr := range policy.Predicates() {
			if !used.Has(pr) {
				continue
			}
			for d := range ds {
				out = append(out, familyObs(pr, d, scope, note))
			}
			for _, p := range under[parent] {
				if s.has(p, pr) {
					out = append(out, familyObs(pr, p, scope, note))
				}
			}
		}
	}
	return out
}

// numberedDir: a name a tool gives its numbered or random temporary
// directories: <word>-<digits> (pytest-12), tmp + 8 of [a-z0-9_] (Python's
// tempfile.mkdtemp).
func numberedDir(b string) bool {
	if i := strings.LastIndexByte(b, '-'); i > 0 && digits(b[i+1:]) {
		w := b[:i]
		return w[0] >= 'a' && w[0] <= 'z' || w[0] >= 'A' && w[0] <= 'Z'
	}
	if r, ok := strings.CutPrefix(b, "tmp"); ok && len(r) == 8 {
		return strings.Trim(r, "abcdefghijklmnopqrstuvwxyz0123456789_") == ""
	}
	return false
}

// rotated: the run made, removed or renamed one of dirs, or used two.
func rotated(s familySeen, dirs map[string]bool) bool {
	if len(dirs) >= 2 {
		return true
	}
	for d := range dirs {
		if s.has(d, policy.Provides) || s.has(d, policy.Deletes) || s.has(d, policy.Renames) {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]bool, f func(string) string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, f(k))
	}
	sort.Strings(out)
	return out
}
