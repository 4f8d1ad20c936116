package lease

import (
	"net/netip"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// The indexes of a Table: a request is decided against the leases that can
// overlap it, found without looking at the others, so that deciding costs
// what the request names, not what the host holds.

// entry is one held lease and its places in the indexes; what it shares
// with the other leases of its grant is in the grant.
type entry struct {
	g         *grant
	id        string
	predicate policy.Predicate
	bucket    uint8 // predicate bucket (see buckets)
	live      bool
	res       Resource
	object    string
	intent    string
	node      *pnode // FILE: its trie node
	nodeAt    int    // in node.at[Match]
	netAt     int    // NET: in its netIndex list
}

// Predicates are counted by bucket: one per KLIS predicate and one for any
// predicate policy does not know (it conflicts with everything, as
// policy.Conflicts says).
const nBuckets = 7

func bucket(p policy.Predicate) uint8 {
	if int(p) < nBuckets-1 {
		return uint8(p)
	}
	return nBuckets - 1
}

// conflictMask[incoming] has bit b set when a held lease of bucket b
// conflicts with an incoming claim of that bucket (KLIS-2's matrix).
var conflictMask = func() (m [nBuckets]uint8) {
	for in := 0; in < nBuckets; in++ {
		for held := 0; held < nBuckets; held++ {
			if policy.Conflicts(policy.Predicate(held), policy.Predicate(in)) {
				m[in] |= 1 << held
			}
		}
	}
	return m
}()

const allBuckets = 1<<nBuckets - 1

// pnode is one path of the FILE trie: the leases whose pattern is rooted
// there (by match kind) and how many leases its subtree holds, by
// predicate bucket, so that a subtree claim skips subtrees that hold
// nothing it conflicts with.
type pnode struct {
	parent *pnode
	name   string
	// kids: a few in a slice (comparing a few names is cheaper than
	// hashing one), many in a map.
	few   []*pnode
	many  map[string]*pnode
	at    [3][]*entry // by policy.Match: exact, children, subtree
	obj   [3]string   // the FILE object of each match kind here, once rendered
	cnt   [nBuckets]int32
	bits  uint8 // bucket b is set when cnt[b] > 0
	total int32
}

const fewKids = 8

func (n *pnode) has(mask uint8) bool { return n.bits&mask != 0 }

func (n *pnode) kid(name string) *pnode {
	if n.many != nil {
		return n.many[name]
	}
	for _, k := range n.few {
		if k.name == name {
			return k
		}
	}
	return nil
}

func (n *pnode) addKid(k *pnode) {
	switch {
	case n.many != nil:
		n.many[k.name] = k
	case len(n.few) < fewKids:
		n.few = append(n.few, k)
	default:
		n.many = make(map[string]*pnode, 2*fewKids)
		for _, x := range n.few {
			n.many[x.name] = x
		}
		n.many[k.name] = k
		n.few = nil
	}
}

// eachKid yields every child.
func (n *pnode) eachKid(yield func(*pnode) bool) {
	for _, k := range n.few {
		if !yield(k) {
			return
		}
	}
	for _, k := range n.many {
		if !yield(k) {
			return
		}
	}
}

// kids returns the children.
func (n *pnode) kids() []*pnode {
	if n.many == nil {
		return n.few
	}
	out := make([]*pnode, 0, len(n.many))
	for _, k := range n.many {
		out = append(out, k)
	}
	return out
}

// ptrie indexes FILE leases by the path their pattern is rooted at.
// Nodes that hold nothing stay until they outnumber the live ones (a lease
// taken and released on the same path again and again does not rebuild
// its path each time), then are swept.
type ptrie struct {
	root  pnode
	empty int // nodes (not the root) whose subtree holds nothing
}

// node returns the node of the clean absolute path p, made if need be.
func (tr *ptrie) node(p string) *pnode {
	n := &tr.root
	if p == "/" {
		return n
	}
	rest := p[1:]
	for rest != "" {
		comp := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			comp, rest = rest[:i], rest[i+1:]
		} else {
			rest = ""
		}
		n = tr.child(n, comp)
	}
	return n
}

// child returns the child name of n, made if need be.
func (tr *ptrie) child(n *pnode, name string) *pnode {
	k := n.kid(name)
	if k == nil {
		k = &pnode{parent: n, name: strings.Clone(name)}
		n.addKid(k)
		tr.empty++
	}
	return k
}

// object is the rendered object of r, whose node is n (rendered once per
// node and match kind: a path leased again and again is not rendered
// again).
func (n *pnode) object(r Resource) string {
	m := r.Path.Match
	if n.obj[m] == "" {
		n.obj[m] = r.String()
	}
	return n.obj[m]
}

func (tr *ptrie) insert(e *entry, n *pnode) {
	m := e.res.Path.Match
	e.node, e.nodeAt = n, len(n.at[m])
	n.at[m] = append(n.at[m], e)
	for x := n; x != nil; x = x.parent {
		if x.total == 0 && x.parent != nil {
			tr.empty--
		}
		x.total++
		x.cnt[e.bucket]++
		x.bits |= 1 << e.bucket
	}
}

func (tr *ptrie) remove(e *entry, live int) {
	n, m := e.node, e.res.Path.Match
	list := n.at[m]
	last := len(list) - 1
	list[e.nodeAt] = list[last]
	list[e.nodeAt].nodeAt = e.nodeAt
	list[last] = nil
	n.at[m] = list[:last]
	e.node = nil
	for x := n; x != nil; x = x.parent {
		x.total--
		if x.cnt[e.bucket]--; x.cnt[e.bucket] == 0 {
			x.bits &^= 1 << e.bucket
		}
		if x.total == 0 && x.parent != nil {
			tr.empty++
		}
	}
	if tr.empty > 1024 && tr.empty > 2*live {
		tr.sweep(&tr.root)
		tr.empty = 0
	}
}

func (tr *ptrie) sweep(n *pnode) {
	kids := n.kids()
	n.few, n.many = nil, nil
	for _, k := range kids {
		if k.total > 0 {
			n.addKid(k)
			tr.sweep(k)
		}
	}
}

// cursor remembers where the last claim's directory is in the trie: the
// claims of a manifest come grouped by directory, and the next one in the
// same directory is found without walking from the root again. It is
// valid while the trie does not change (one decision).
type cursor struct {
	dir  string
	node *pnode   // the deepest node that exists on the way to dir
	full bool     // node is dir's own
	anc  []*pnode // node and its ancestors that have subtree leases
	// Where the last pattern each was given is: its own node when it
	// exists, else its directory's when that exists.
	leaf, leafDir *pnode
	// dirClean: the last pattern's directory is a node of the trie, so
	// it is clean (nodes are made only for clean paths).
	dirClean bool
}

func (tr *ptrie) locate(dir string, c *cursor) {
	if c.node != nil && c.dir == dir {
		return
	}
	n, full := &tr.root, true
	if dir != "/" {
		rest := dir[1:]
		for {
			// A manual scan: components are short, a call costs more.
			comp, last := rest, true
			for i := 0; i < len(rest); i++ {
				if rest[i] == '/' {
					comp, rest, last = rest[:i], rest[i+1:], false
					break
				}
			}
			// An empty component ("//", a trailing slash) is no node:
			// nodes have clean paths.
			k := n.kid(comp)
			if comp == "" || k == nil {
				full = false
				break
			}
			n = k
			if last {
				break
			}
		}
	}
	c.dir, c.node, c.full, c.anc = dir, n, full, c.anc[:0]
	for x := n; x != nil; x = x.parent {
		if len(x.at[policy.MatchSubtree]) > 0 {
			c.anc = append(c.anc, x)
		}
	}
}

// each appends to out every lease whose pattern overlaps pat and whose
// bucket is in mask (see PathOverlap for the cases).
func (tr *ptrie) each(pat policy.PathPattern, mask uint8, out []*entry, c *cursor) []*entry {
	c.leaf, c.leafDir, c.dirClean = nil, nil, false
	if !tr.root.has(mask) {
		return out
	}
	n := &tr.root
	c.leaf = n
	if p := pat.Path; p != "/" {
		c.leaf = nil
		i := strings.LastIndexByte(p, '/')
		dir, leaf := p[:i], p[i+1:]
		if i == 0 {
			dir = "/"
		}
		tr.locate(dir, c)
		c.dirClean = c.full
		// Every proper ancestor's subtree covers pat's path.
		for _, a := range c.anc {
			out = visit(a.at[policy.MatchSubtree], mask, out)
		}
		if !c.full {
			return out // nothing is held at or below pat's path
		}
		// The parent's children cover pat's path, which an exact or
		// subtree pattern covers too; a children pattern does not cover
		// its own path.
		if pat.Match != policy.MatchChildren {
			out = visit(c.node.at[policy.MatchChildren], mask, out)
		}
		n = c.node.kid(leaf)
		c.leaf, c.leafDir = n, c.node
		if n == nil || !n.has(mask) {
			return out // nothing that conflicts is held at or below it
		}
	}
	out = visit(n.at[policy.MatchSubtree], mask, out)
	if pat.Match != policy.MatchChildren {
		out = visit(n.at[policy.MatchExact], mask, out)
	}
	if pat.Match != policy.MatchExact {
		out = visit(n.at[policy.MatchChildren], mask, out)
	}
	switch pat.Match {
	case policy.MatchSubtree:
		out = visitKids(n, mask, out)
	case policy.MatchChildren:
		// A child's exact path or its subtree is a child of pat's path;
		// its children pattern is one level deeper.
		for k := range n.eachKid {
			if k.has(mask) {
				out = visit(k.at[policy.MatchExact], mask, out)
				out = visit(k.at[policy.MatchSubtree], mask, out)
			}
		}
	}
	return out
}

func visit(list []*entry, mask uint8, out []*entry) []*entry {
	for _, e := range list {
		if mask&(1<<e.bucket) != 0 {
			out = append(out, e)
		}
	}
	return out
}

func visitAll(n *pnode, mask uint8, out []*entry) []*entry {
	if !n.has(mask) {
		return out
	}
	for m := range n.at {
		out = visit(n.at[m], mask, out)
	}
	return visitKids(n, mask, out)
}

func visitKids(n *pnode, mask uint8, out []*entry) []*entry {
	for k := range n.eachKid {
		out = visitAll(k, mask, out)
	}
	return out
}

// netIndex indexes NET leases: by host name, by address (single-address
// patterns), and in lists the address ranges and the whole address
// families (which meet every name) and raw sockets.
type netIndex struct {
	hosts map[string][]*entry
	addrs map[netip.Addr][]*entry
	cidrs []*entry // ranges narrower than a whole family
	wide  []*entry // 0.0.0.0/0, ::/0
	raw   []*entry
	// spare is the list of the last key emptied, for the next key: a
	// session that takes and frees one endpoint all day does not make
	// its list each time.
	spare []*entry
}

func hostKey(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }

// slot is where pattern n is kept: a list, or a key of one of the maps.
func (x *netIndex) slot(n policy.NetPattern) (list *[]*entry, host string, addr netip.Addr) {
	switch {
	case n.Raw:
		return &x.raw, "", addr
	case n.Host != "":
		return nil, hostKey(n.Host), addr
	case wholeFamily(n.Prefix):
		return &x.wide, "", addr
	case n.Prefix.IsSingleIP():
		return nil, "", n.Prefix.Addr()
	}
	return &x.cidrs, "", addr
}

func (x *netIndex) insert(e *entry) {
	list, host, addr := x.slot(e.res.Net)
	switch {
	case list != nil:
		e.netAt = len(*list)
		*list = append(*list, e)
	case host != "":
		if x.hosts == nil {
			x.hosts = map[string][]*entry{}
		}
		l, ok := x.hosts[host]
		if !ok && x.spare != nil {
			l, x.spare = x.spare, nil
		}
		e.netAt = len(l)
		x.hosts[host] = append(l, e)
	default:
		if x.addrs == nil {
			x.addrs = map[netip.Addr][]*entry{}
		}
		l, ok := x.addrs[addr]
		if !ok && x.spare != nil {
			l, x.spare = x.spare, nil
		}
		e.netAt = len(l)
		x.addrs[addr] = append(l, e)
	}
}

func cut(l []*entry, e *entry) []*entry {
	last := len(l) - 1
	l[e.netAt] = l[last]
	l[e.netAt].netAt = e.netAt
	l[last] = nil
	return l[:last]
}

func (x *netIndex) remove(e *entry) {
	list, host, addr := x.slot(e.res.Net)
	switch {
	case list != nil:
		*list = cut(*list, e)
	case host != "":
		if l := cut(x.hosts[host], e); len(l) > 0 {
			x.hosts[host] = l
		} else {
			delete(x.hosts, host)
			x.spare = l
		}
	default:
		if l := cut(x.addrs[addr], e); len(l) > 0 {
			x.addrs[addr] = l
		} else {
			delete(x.addrs, addr)
			x.spare = l
		}
	}
}

func (x *netIndex) each(n policy.NetPattern, mask uint8, out []*entry) []*entry {
	try := func(list []*entry) {
		for _, e := range list {
			if mask&(1<<e.bucket) != 0 && netOverlap(e.res.Net, n) {
				out = append(out, e)
			}
		}
	}
	switch {
	case n.Raw:
		try(x.raw)
	case n.Host != "":
		try(x.hosts[hostKey(n.Host)])
		try(x.wide) // a whole address family meets every name
	default:
		try(x.wide)
		try(x.cidrs)
		if n.Prefix.IsSingleIP() {
			try(x.addrs[n.Prefix.Addr()])
		} else {
			for _, l := range x.addrs {
				try(l)
			}
		}
		if wholeFamily(n.Prefix) {
			for _, l := range x.hosts {
				try(l)
			}
		}
	}
	return out
}

// expHeap orders grants by deadline, so that expiring costs what
// expires.
type expHeap []*grant

func (h expHeap) less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }

func (h expHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapAt, h[j].heapAt = i, j
}

func (h *expHeap) push(g *grant) {
	g.heapAt = len(*h)
	*h = append(*h, g)
	h.up(g.heapAt)
}

func (h *expHeap) remove(i int) *grant {
	old := *h
	last := len(old) - 1
	g := old[i]
	if i != last {
		h.swap(i, last)
	}
	old[last] = nil
	*h = old[:last]
	if i != last {
		h.fix(i)
	}
	g.heapAt = -1
	return g
}

func (h expHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h expHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h expHeap) down(i0 int) bool {
	i, n := i0, len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
