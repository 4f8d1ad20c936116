package decide

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/klocklabs/klock/policy"
	"go.yaml.in/yaml/v3"
)

// DefaultLearnThreshold is how many distinct observed paths directly in one
// directory (with one predicate) make --learn declare the directory's
// subtree instead of each path.
const DefaultLearnThreshold = 4

// WithLearnThreshold sets the collapse threshold of Learned (minimum 2).
func WithLearnThreshold(n int) Option {
	return func(e *Engine) { e.learnMin = max(n, 2) }
}

// ErrLearn marks a learned manifest that failed its own check.
var ErrLearn = errors.New("learned manifest does not cover the run")

// learnedIntent is one intent --learn adds.
type learnedIntent struct {
	pred    policy.Predicate
	obj     string // object string, e.g. FILE:/srv/repo/build/** (workdir not yet contracted)
	typ     policy.ObjectType
	comment string
}

// Learned returns a YAML manifest that would have allowed the run: m's
// fields (minus its signature, which no longer matches) with m's intents
// followed by intents for every triple that was a violation, and for the
// reads, removals and renames of the session's own files that a file wall
// would not have let through (ownFilesUnwalled). Generalization:
//   - FILE: exact paths; when at least the threshold (DefaultLearnThreshold)
//     of distinct paths with one predicate sit directly in one directory,
//     the directory's subtree (/dir/**) instead, repeated upwards. Never for
//     a directory at depth < 2 (/etc/**, /home/**), a home directory
//     (/home/<user>, /root), or anything under /proc, /sys, /dev, /run;
//     for writing predicates (PROVIDES, MUTATES, DELETES, RENAMES) only
//     inside the workdir, /tmp or /var/tmp, and never from the workdir
//     into a directory above it (a workdir in /tmp stays declared on
//     itself). What the run needed on files it made itself (their names
//     change from run to run: git's objects, npm's timestamped logs, go
//     build's $WORK, sed -i's sedXXXXXX) is declared on the directory that
//     existed before the run, dir/* or dir/** (ownScopes, learn_own.go).
//     A path the manifest language cannot write exactly (a wildcard
//     character, "$") becomes its directory's children (/dir/*). Every
//     collapse is commented.
//   - FILE, file families (learn_family.go): what a tool rotates beside
//     its files (SQLite's -wal, -shm, -journal; lock files; atomic-write
//     temporaries; numbered temporary directories) is declared as the
//     operations the family needs, not only those this run did.
//   - FILE, a private /tmp (learn_tmp.go): everything the run did in
//     /tmp and /var/tmp, on ${tmpdir}/** and /var/tmp/**.
//   - NET: the exact host name, port and protocol where the agent looked
//     the address up (learn_net.go), else the exact address.
//   - PROC: the exact executable.
//
// A learned wildcard outside the workdir and the private /tmp gets a
// "# klock review:" comment above it (ReviewLearned lists them).
//
// When src (the manifest's own bytes) is given, the output is src as the
// operator wrote it, comments, order and all, with the learned intents
// appended to its intents and its signature removed: the review is of the
// learned lines alone. Without src, m is encoded (what it sets, nothing
// more).
//
// Paths under the workdir are written ${workdir}/...; the output is checked:
// it must parse with policy.Parse, compile, and allow every learned triple
// (else ErrLearn). Triples no intent can express (relative paths, unknown
// types) are listed in a comment and skipped.
func (e *Engine) Learned(m *policy.Manifest, src []byte) ([]byte, error) {
	if m == nil {
		return nil, errors.New("learn: no manifest")
	}
	e.mu.Lock()
	var need []learnObs
	var hidden []string
	for _, o := range e.obs {
		switch {
		case o.Violation && o.Hidden:
			// Where a file's unknown names lie: no run declares that, and
			// the next run's write is judged the same; the link must go.
			hidden = append(hidden, o.Triple.String()+" (a write through a file with a hard link klock's backup did not find: remove that link before the session)")
		case o.Violation && o.Tmpfile:
			// Unnamed files (O_TMPFILE) made in a directory: the
			// directory's subtree, which covers the directory itself (a
			// PROVIDES of it alone would be its own creation, a right on
			// its parent).
			need = append(need, learnObs{t: o.Triple, count: o.Count, syscall: o.Syscall,
				scope: policy.PathPattern{Path: o.Triple.Path, Match: policy.MatchSubtree},
				note:  "learned: unnamed files (O_TMPFILE) made in this directory; "})
		case o.Violation:
			need = append(need, learnObs{t: o.Triple, count: o.Count, syscall: o.Syscall})
		case o.Created && (ownFilesUnwalled.Has(o.Triple.Predicate) || o.Triple.Predicate == policy.Mutates && e.create.has(o.Triple.Path)):
			// A file the run made and left behind is there when the next
			// run starts: its writes then are to an existing file, which
			// a PROVIDES scope does not cover.
			// On the scope the file was made in: a wall's rule attaches to
			// a path that exists when the session starts, and the file
			// will not exist then.
			need = append(need, learnObs{t: o.Triple, count: o.Count, syscall: o.Syscall, scope: e.madeIn(o.Triple.Path)})
		}
	}
	need = append(need, e.leftBehind(m.Workdir)...)
	gone, own := e.madeAndGone(), e.ownFiles()
	need = append(need, e.builtCopies(need, own)...)
	names := e.learnNames()
	threshold := e.learnMin
	fam := familyNeeds(e.familySeen(), m.Workdir)
	scratch := e.privateTmpObs(m)
	e.mu.Unlock()
	ownScopes(need, own, gone, m.Workdir)
	for i := range need {
		if c := need[i].copyOf; c != "" && need[i].scope.Path != "" {
			need[i].note = fmt.Sprintf("learned: a copy the tool kept of %s, a program the run built and ran (go run's build cache: the next run runs the copy); ", path.Base(c))
		}
	}
	workdirReads(need, m.Workdir)
	base, _ := policy.Compile(m) // nil (nothing filtered) if it does not compile
	need = withImplied(need, append(fam, scratch...), base)
	need = tmpScopes(need, m)
	if threshold == 0 {
		threshold = DefaultLearnThreshold
	}
	sort.Slice(need, func(i, j int) bool { return need[i].t.String() < need[j].t.String() })

	named, rest := nameHosts(need, names, declaresHost(m))
	learned, skipped := generalize(rest, m.Workdir, threshold)
	sort.Strings(hidden)
	skipped = append(skipped, hidden...)
	learned = append(learned, named...)
	sortLearned(learned)
	out, err := renderLearned(m, src, learned, skipped)
	if err != nil {
		return nil, err
	}
	if err := checkLearned(out, rest, skipped, names); err != nil {
		return out, err
	}
	return out, nil
}

// ownFilesUnwalled are the predicates on the session's own files that the
// engine allows (created by the session) but a file wall may not: Landlock
// does not know whose a file is, and a PROVIDES scope gives it the rights
// to make, write and truncate, not to read, remove or rename. A learned
// manifest declares them, so that it lets the same run through whichever
// wall the strict session gets; on bpf-lsm, which does know, that is wider
// than needed, and the review sees it.
var ownFilesUnwalled = policy.AccessOf(policy.Consumes, policy.Deletes, policy.Renames)

type learnObs struct {
	t       policy.Triple
	count   uint64
	syscall string // of its first occurrence
	// scope, when its Path is set, is the pattern to declare instead of
	// t's exact path; note, when set, says why (for the review).
	scope policy.PathPattern
	note  string
	// copyOf, for an exec implied by builtCopies, is the program the run
	// ran of which this is the kept copy.
	copyOf string
	// family: implied by a file family (learn_family.go), not observed:
	// it does not count towards collapsing a directory.
	family bool
}

// builtCopies are the execs a run implies on the copies a tool kept of the
// programs the run built and ran: go run (Go 1.24+) links the program in
// its work directory, runs it from there, and stores it in the build cache
// ($GOCACHE/<hh>/<hash>-d/<name>); the next run, its cache warm, runs the
// cached copy instead. A copy is a file the run made and left in place,
// with the base name of a program it built and ran, in another directory.
// Call with e.mu held.
func (e *Engine) builtCopies(need []learnObs, own map[string]bool) []learnObs {
	ran := map[string]string{} // base name -> a program the run built and ran
	for _, o := range need {
		if o.t.Type == policy.ObjProc && o.t.Predicate == policy.Provides && own[o.t.Path] {
			ran[path.Base(o.t.Path)] = o.t.Path
		}
	}
	if len(ran) == 0 {
		return nil
	}
	var out []learnObs
	for p := range own {
		prog, ok := ran[path.Base(p)]
		if !ok || strings.HasSuffix(p, "/") || parentDir(p) == parentDir(prog) || !e.create.has(p) {
			continue
		}
		if x := policy.ExecTriple(p); e.obs[x] == nil {
			out = append(out, learnObs{t: x, syscall: "execve", copyOf: prog})
		}
	}
	return out
}

// madeAndGone are the files the run made and then renamed away or
// removed: sed -i's sedXXXXXX, an editor's or Python's temporary file
// renamed over its target, a lock file. Call with e.mu held.
func (e *Engine) madeAndGone() map[string]bool {
	made, gone := map[string]bool{}, map[string]bool{}
	for t := range e.obs {
		if t.Type != policy.ObjFile {
			continue
		}
		switch t.Predicate {
		case policy.Provides:
			made[t.Path] = true
		case policy.Renames, policy.Deletes:
			gone[t.Path] = true
		}
	}
	for p := range gone {
		if !made[p] {
			delete(gone, p)
		}
	}
	return gone
}

// scratchArea: dir is the workdir, /tmp, /var/tmp or below one of them,
// where a learned manifest may declare writes wider than one path.
func scratchArea(dir, workdir string) bool {
	for _, w := range []string{workdir, "/tmp", "/var/tmp"} {
		if w != "" && w != "/" && (dir == w || strings.HasPrefix(dir, w+"/")) {
			return true
		}
	}
	return false
}

// madeIn is the pattern of the PROVIDES intent (declared or leased) that
// lets the session make path, when it covers more than path itself; the
// zero pattern otherwise. Call with e.mu held.
func (e *Engine) madeIn(p string) policy.PathPattern {
	d := e.rs.Allows(policy.FileTriple(policy.Provides, p))
	if !d.Allowed || d.Intent == nil || d.Intent.Object.Type != policy.ObjFile || d.Intent.Object.Path.Match == policy.MatchExact {
		return policy.PathPattern{}
	}
	return d.Intent.Object.Path
}

// generalize turns the violating triples into intents.
func generalize(need []learnObs, workdir string, threshold int) (out []learnedIntent, skipped []string) {
	files := map[policy.Predicate][]learnObs{}
	procs := map[string]bool{} // PROC patterns learned, to declare each once
	for _, o := range need {
		t := o.t
		switch t.Type {
		case policy.ObjFile:
			if !absClean(t.Path) {
				skipped = append(skipped, t.String())
				continue
			}
			files[t.Predicate] = append(files[t.Predicate], o)
		case policy.ObjProc:
			if t.Predicate != policy.Provides || !absClean(t.Path) {
				skipped = append(skipped, t.String())
				continue
			}
			pat, note := exactOrNearest(t.Path)
			if o.scope.Path != "" {
				pat, note = o.scope.String(), o.note
			}
			if procs[pat] {
				continue // another program built in the same directory: one intent
			}
			procs[pat] = true
			c := seen(o.count)
			if strings.HasPrefix(note, "learned:") {
				c = strings.TrimPrefix(c, "learned: ")
			}
			out = append(out, learnedIntent{pred: t.Predicate, typ: t.Type, obj: "PROC:" + pat, comment: note + c})
		case policy.ObjNet:
			n, ok := netPatternFor(t)
			if !ok || (t.Predicate != policy.Consumes && t.Predicate != policy.Provides) {
				skipped = append(skipped, t.String())
				continue
			}
			out = append(out, learnedIntent{pred: t.Predicate, typ: t.Type, obj: "NET:" + n.String(), comment: seen(o.count)})
		default:
			skipped = append(skipped, t.String())
		}
	}
	for _, p := range policy.Predicates() {
		out = append(out, collapse(p, files[p], workdir, threshold)...)
	}
	sortLearned(out)
	return out, skipped
}

// sortLearned orders learned intents by object type, object, predicate.
func sortLearned(out []learnedIntent) {
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].typ != out[j].typ {
			return out[i].typ < out[j].typ
		}
		if out[i].obj != out[j].obj {
			return out[i].obj < out[j].obj
		}
		return out[i].pred < out[j].pred
	})
}

func seen(n uint64) string {
	if n == 0 {
		return "learned: not done by this run, implied by it"
	}
	if n == 1 {
		return "learned: seen once"
	}
	return fmt.Sprintf("learned: seen %d times", n)
}

func absClean(p string) bool { return p != "" && p[0] == '/' && path.Clean(p) == p }

// exactOrNearest returns p when the manifest language can write it as an
// exact path, else the nearest expressible pattern and a note.
func exactOrNearest(p string) (string, string) {
	if expressible(p) {
		return p, ""
	}
	dir, match := path.Dir(p), policy.MatchChildren
	for !expressible(dir) {
		dir, match = path.Dir(dir), policy.MatchSubtree
	}
	return policy.PathPattern{Path: dir, Match: match}.String(), fmt.Sprintf("widened: %q cannot be written exactly; ", p)
}

func expressible(p string) bool {
	pp, err := policy.ParsePathPattern(p)
	return err == nil && pp.Match == policy.MatchExact && pp.Path == p && !strings.HasPrefix(p, policy.WorkdirVar)
}

type fileEntry struct {
	pat   policy.PathPattern
	paths int
	count uint64
	note  string
}

// collapse generalizes one predicate's paths.
func collapse(p policy.Predicate, obs []learnObs, workdir string, threshold int) []learnedIntent {
	entries := map[policy.PathPattern]*fileEntry{}
	for _, o := range obs {
		pp, note := o.scope, o.note
		if note == "" {
			note = "learned: on the scope the session made the file in (its own file: a wall cannot tell whose a file is); "
		}
		if pp.Path == "" {
			var s string
			s, note = exactOrNearest(o.t.Path)
			var err error
			if pp, err = policy.ParsePathPattern(s); err != nil {
				continue // unreachable: exactOrNearest returns expressible forms
			}
		}
		e := entries[pp]
		if e == nil {
			e = &fileEntry{pat: pp, note: note}
			entries[pp] = e
		}
		if !o.family {
			e.paths++
		}
		e.count += o.count
	}
	for changed := true; changed; {
		changed = false
		// How many observed paths sit directly in each directory: an
		// exact path or a subtree counts once in its parent, a dir/* (the
		// run's own files, ownScopes) as its paths in dir. What is
		// declared on the workdir stays there: it never counts towards a
		// directory above it (a workdir in /tmp).
		groups := map[string]int{}
		for pat, e := range entries {
			switch {
			case pat.Match == policy.MatchChildren:
				groups[pat.Path] += e.paths
			case pat.Path == workdir:
			case pat.Path != "/" && e.paths > 0:
				groups[path.Dir(pat.Path)]++
			}
		}
		dirs := make([]string, 0, len(groups))
		for d := range groups {
			dirs = append(dirs, d)
		}
		sort.Strings(dirs)
		for _, d := range dirs {
			if groups[d] < threshold || !sensible(d, p, workdir) {
				continue
			}
			merged := mergeSubtree(entries, d, workdir)
			merged.note = fmt.Sprintf("learned: %d observed paths collapsed into the subtree; ", merged.paths)
			changed = true
			break
		}
	}
	out := make([]learnedIntent, 0, len(entries))
	for _, e := range entries {
		c := e.note
		if strings.HasPrefix(c, "learned:") {
			c += strings.TrimPrefix(seen(e.count), "learned: ")
		} else {
			c += seen(e.count)
		}
		out = append(out, learnedIntent{pred: p, typ: policy.ObjFile, obj: "FILE:" + e.pat.String(), comment: c})
	}
	return out
}

// mergeSubtree replaces every entry dir/** covers with one entry for dir/**
// (paths and counts summed) and returns it. Entries in the workdir stay
// when dir is above it: the review sees what the run did in its workdir.
func mergeSubtree(entries map[policy.PathPattern]*fileEntry, dir, workdir string) *fileEntry {
	sub := policy.PathPattern{Path: dir, Match: policy.MatchSubtree}
	merged := &fileEntry{pat: sub}
	for pat, e := range entries {
		if sub.Covers(pat.Path) && !(aboveWorkdir(dir, workdir) && inWorkdir(pat.Path, workdir)) {
			merged.paths += e.paths
			merged.count += e.count
			delete(entries, pat)
		}
	}
	entries[sub] = merged
	return merged
}

// inWorkdir: p is the workdir or below it.
func inWorkdir(p, workdir string) bool {
	return workdir != "" && workdir != "/" && (p == workdir || strings.HasPrefix(p, workdir+"/"))
}

// aboveWorkdir: dir is a proper ancestor of the workdir.
func aboveWorkdir(dir, workdir string) bool {
	return workdir != "" && workdir != "/" && (dir == "/" || strings.HasPrefix(workdir, dir+"/"))
}

var neverCollapse = []string{"/proc", "/sys", "/dev", "/run", "/var/run"}

// sensible says whether dir may be declared as a subtree for predicate p.
func sensible(dir string, p policy.Predicate, workdir string) bool {
	if strings.Count(dir, "/") < 2 || dir == "/root" {
		return false
	}
	if strings.HasPrefix(dir, "/home/") && strings.Count(dir, "/") == 2 {
		return false
	}
	for _, n := range neverCollapse {
		if dir == n || strings.HasPrefix(dir, n+"/") {
			return false
		}
	}
	if p == policy.Consumes || p == policy.DependsOn {
		return true
	}
	return scratchArea(dir, workdir)
}

// contract writes a path under the workdir as ${workdir}/....
func contract(obj, workdir string) string {
	typ, p, ok := strings.Cut(obj, ":")
	if !ok || (typ != "FILE" && typ != "PROC") || workdir == "" || workdir == "/" {
		return obj
	}
	if p == workdir || strings.HasPrefix(p, workdir+"/") {
		return typ + ":" + policy.WorkdirVar + p[len(workdir):]
	}
	return obj
}

// renderLearned writes the manifest document.
func renderLearned(m *policy.Manifest, src []byte, learned []learnedIntent, skipped []string) ([]byte, error) {
	var doc yaml.Node
	if len(src) > 0 {
		if err := yaml.Unmarshal(src, &doc); err != nil {
			return nil, fmt.Errorf("learn: read the manifest: %w", err)
		}
	} else if err := doc.Encode(m); err != nil {
		return nil, fmt.Errorf("learn: encode manifest: %w", err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, errors.New("learn: the manifest is not a YAML mapping")
	}
	intents := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	if len(src) > 0 {
		if cur := getKey(root, "intents"); cur != nil && cur.Kind == yaml.SequenceNode {
			intents = cur // as written
		}
	} else {
		prune(root)
	}
	have := map[string]bool{}
	for _, in := range m.Intents {
		have[in.String()] = true
		if len(src) > 0 {
			continue // already in the sequence, as written
		}
		obj := contract(in.Object.String(), m.Workdir)
		if in.Subject == "" && in.Confidence == "" && in.Reason == "" && !strings.ContainsAny(obj, " \t\n") {
			intents.Content = append(intents.Content, str(in.Predicate.String()+" "+obj))
			continue
		}
		mp := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		add := func(k, v string) {
			if v != "" {
				mp.Content = append(mp.Content, str(k), str(v))
			}
		}
		add("predicate", in.Predicate.String())
		add("object", obj)
		add("subject", in.Subject)
		add("confidence", in.Confidence)
		add("reason", in.Reason)
		intents.Content = append(intents.Content, mp)
	}
	for _, l := range learned {
		s := l.pred.String() + " " + l.obj
		if have[s] {
			continue
		}
		have[s] = true
		obj := contractTmp(contract(l.obj, m.Workdir), m.PrivateTmp())
		var n *yaml.Node
		if strings.ContainsAny(obj, " \t\n") {
			n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
				str("predicate"), str(l.pred.String()), str("object"), str(obj)}}
		} else {
			n = str(l.pred.String() + " " + obj)
		}
		n.LineComment = "# " + l.comment
		intents.Content = append(intents.Content, n)
	}
	// Learned from a manifest learned before: what this run declared wider
	// replaces the narrower, and one marker heads the learned intents.
	dropCovered(intents)
	markReview(intents, m.Workdir, m.PrivateTmp())
	markLearned(intents)
	setKey(root, "intents", intents)
	deleteKey(root, "signature")
	head := learnedHeader
	if len(skipped) > 0 {
		head += "\n# Observed but not expressible as an intent (not learned):"
		for _, s := range skipped {
			head += "\n#   " + s
		}
	}
	// The parser attaches a document's first comment to the document or
	// to its first key: an earlier run's header is dropped from either.
	doc.HeadComment = withoutHeader(doc.HeadComment)
	if len(root.Content) > 0 {
		root.Content[0].HeadComment = withoutHeader(root.Content[0].HeadComment)
	}
	if prevHead := withoutHeader(root.HeadComment); prevHead != "" {
		head += "\n#\n" + prevHead
	}
	root.HeadComment = head
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("learn: encode: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("learn: encode: %w", err)
	}
	return buf.Bytes(), nil
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// prune drops nulls, empty strings and empty collections from maps, so the
// output only holds what the manifest set (the policy decoder rejects some
// explicit nulls, e.g. KCC's float money fields).
func prune(n *yaml.Node) bool {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Tag == "!!null" || (n.Tag == "!!str" && n.Value == "")
	case yaml.MappingNode:
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			if prune(n.Content[i+1]) {
				continue
			}
			kept = append(kept, n.Content[i], n.Content[i+1])
		}
		n.Content = kept
		return len(n.Content) == 0
	case yaml.SequenceNode:
		for _, c := range n.Content {
			prune(c)
		}
		return len(n.Content) == 0
	}
	return false
}

func getKey(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, str(key), v)
}

func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

// checkLearned parses and compiles the output and checks it allows every
// learned triple (with names resolved to what they answered in the run);
// the triples nameHosts learned by name, and the DNS it dropped, are
// checked through the names: need is what is left.
func checkLearned(out []byte, need []learnObs, skipped []string, names netNames) error {
	m, err := policy.Parse("learned.yaml", out)
	if err != nil {
		return fmt.Errorf("%w: it does not parse: %w", ErrLearn, err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		return fmt.Errorf("%w: it does not compile: %w", ErrLearn, err)
	}
	if rs, err = rs.Resolve(names.lookup); err != nil {
		return fmt.Errorf("%w: a learned name: %w", ErrLearn, err)
	}
	if rs, err = rs.WithResolvers(names.nameServers); err != nil {
		return fmt.Errorf("%w: %w", ErrLearn, err)
	}
	skip := map[string]bool{}
	for _, s := range skipped {
		skip[s] = true
	}
	var missing []string
	for _, o := range need {
		if skip[o.t.String()] {
			continue
		}
		if !rs.Allows(o.t).Allowed {
			missing = append(missing, o.t.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrLearn, strings.Join(missing, ", "))
	}
	return nil
}
