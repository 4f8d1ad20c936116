package policy

import "strings"

// ruleSlot is what one pattern (exact, children or subtree at one node)
// grants: by[p] is 1 + the index of the intent that grants predicate p.
type ruleSlot struct {
	declared Access
	direct   Access
	by       [numPredicates]int32
}

func (s *ruleSlot) add(q Predicate, intent int) {
	s.declared |= AccessOf(q)
	for _, p := range Predicates() {
		if !Grants(q).Has(p) {
			continue
		}
		// A direct declaration of p wins over an implied one.
		if s.by[p] == 0 || (p == q && !s.direct.Has(p)) {
			s.by[p] = int32(intent + 1)
		}
	}
	s.direct |= AccessOf(q)
}

type pathNode struct {
	children             map[string]*pathNode
	exact, kids, subtree ruleSlot
}

// pathIndex answers "which intent grants predicate p on this path" in one
// walk over the path's components, without allocating.
type pathIndex struct{ root pathNode }

func (ix *pathIndex) node(p string) *pathNode {
	n := &ix.root
	if p == "/" {
		return n
	}
	for _, c := range strings.Split(p[1:], "/") {
		if n.children == nil {
			n.children = map[string]*pathNode{}
		}
		next := n.children[c]
		if next == nil {
			next = &pathNode{}
			n.children[c] = next
		}
		n = next
	}
	return n
}

func (ix *pathIndex) add(pat PathPattern, q Predicate, intent int) {
	n := ix.node(pat.Path)
	switch pat.Match {
	case MatchExact:
		n.exact.add(q, intent)
	case MatchChildren:
		n.kids.add(q, intent)
	case MatchSubtree:
		n.subtree.add(q, intent)
	}
}

// lookup returns 1+intent index of the most specific rule granting p on the
// clean absolute path q (0 when none does) and the union of predicates
// declared by every rule that covers q.
func (ix *pathIndex) lookup(q string, p Predicate) (best int32, declared Access) {
	best, declared, _ = ix.find(q, p, false)
	return best, declared
}

// lookupBelow is lookup for every path below dir, at any depth, and
// reports whether it is the same for all of them: false when some rule
// names a path below dir (dir/x, dir/x/*, dir/x/**) or its children
// (dir/*, which deeper paths do not get).
func (ix *pathIndex) lookupBelow(dir string, p Predicate) (best int32, declared Access, same bool) {
	if dir == "" || dir == "/" || dir[0] != '/' {
		return 0, 0, false
	}
	// The last component is never looked at: find stops at dir's node.
	return ix.find(dir+"/*", p, true)
}

// find is lookup; with below it stops before q's last component and says
// whether dir's node has no rule below it.
func (ix *pathIndex) find(q string, p Predicate, below bool) (best int32, declared Access, same bool) {
	if q == "" || q[0] != '/' {
		return 0, 0, false
	}
	bestRank := -1
	// A rule that declares p directly beats one that only implies it (a
	// read under CONSUMES /a/** and MUTATES /a/b/** is the CONSUMES's use);
	// among equals the most specific wins.
	consider := func(s *ruleSlot, rank int) {
		declared |= s.declared
		if s.direct.Has(p) {
			rank += 1 << 20
		}
		if s.by[p] != 0 && rank >= bestRank {
			best, bestRank = s.by[p], rank
		}
	}
	n := &ix.root
	consider(&n.subtree, 0)
	if q == "/" {
		consider(&n.exact, 2)
		return best, declared, false
	}
	rest := q[1:]
	for depth := 1; ; depth++ {
		i := strings.IndexByte(rest, '/')
		comp, last := rest, i < 0
		if !last {
			comp = rest[:i]
		}
		if last {
			if below {
				return best, declared, len(n.children) == 0 && n.kids.declared == 0
			}
			consider(&n.kids, 3*depth+1)
		}
		child := n.children[comp]
		if child == nil {
			return best, declared, true
		}
		n = child
		consider(&n.subtree, 3*depth)
		if last {
			consider(&n.exact, 3*depth+2)
			return best, declared, false
		}
		rest = rest[i+1:]
	}
}
