package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// Ruleset is a compiled manifest: the normalized rules a kernel backend
// loads, and the index that answers Allows. A Ruleset is immutable; With
// returns an amended copy (permissive mode's Dynamic Lease Acquisition).
type Ruleset struct {
	Agent    string
	Mode     Mode
	Workdir  string
	Baseline Baseline

	// Intents holds the manifest's intents followed by the baseline's and
	// any amendments; rules refer to them by index.
	Intents []Intent
	// Files are the FILE rules merged by pattern, sorted by path.
	Files []PathRule
	// Exec are the PROC rules (PROVIDES PROC: may be executed).
	Exec []PathRule
	// Net are the NET rules; host names stay unresolved until Resolve.
	Net []NetRule
	// RawSockets is true when NET:raw is declared.
	RawSockets bool
	// Interpreters are ELF loaders the kernel may open for a declared
	// binary; a direct exec of one is an exec of an undeclared binary.
	Interpreters []string
	// Libraries are the baseline's library directories (system-ro): a
	// file there may be mapped executable without a PROC intent, unless
	// the rules let the agent write, create or rename it (MapsExec).
	Libraries []PathPattern

	files, exec pathIndex
	netIdx      netIndex
	// hosts holds what Resolve found for each host name; build expands
	// host rules from it, so amendments (With) keep the addresses.
	hosts map[string][]netip.Addr
	// answers holds what the session's DNS proxy answered for each
	// declared host pattern (WithHostAddrs), expanded like hosts.
	answers map[string][]netip.Addr
	// links holds what FollowLinks found: a declared path -> the path the
	// kernel will name it by. build compiles a pattern at both.
	links map[string]string
}

// netIndex narrows NET rules by destination port: rules on at most
// narrowPorts ports are listed under each port, wider ones are scanned.
type netIndex struct {
	byPort map[uint16][]int32
	wide   []int32
	raw    []int32
}

const narrowPorts = 64

func buildNetIndex(rules []NetRule) netIndex {
	ix := netIndex{byPort: map[uint16][]int32{}}
	for i, r := range rules {
		switch p := r.Pattern; {
		case p.Raw:
			ix.raw = append(ix.raw, int32(i))
		case int(p.Ports.Hi)-int(p.Ports.Lo) < narrowPorts:
			for port := int(p.Ports.Lo); port <= int(p.Ports.Hi); port++ {
				ix.byPort[uint16(port)] = append(ix.byPort[uint16(port)], int32(i))
			}
		default:
			ix.wide = append(ix.wide, int32(i))
		}
	}
	return ix
}

// PathRule is one FILE or PROC pattern and the predicates declared on it.
type PathRule struct {
	Pattern PathPattern `json:"pattern"`
	Access  Access      `json:"access"`  // declared predicates (without implications)
	Grants  Access      `json:"grants"`  // what they allow (with implications)
	Intents []int       `json:"intents"` // indexes into Ruleset.Intents
}

// NetRule is one NET pattern.
type NetRule struct {
	Pattern NetPattern `json:"pattern"`
	Access  Access     `json:"access"` // CONSUMES: connect/send; PROVIDES: bind/listen
	Intent  int        `json:"intent"`
}

// Compile turns a validated manifest into a Ruleset.
func Compile(m *Manifest) (*Ruleset, error) {
	intents := append(append([]Intent(nil), m.Intents...), baselineIntents(m.Baseline)...)
	rs := &Ruleset{Agent: m.Agent.ID, Mode: m.Mode, Workdir: m.Workdir, Baseline: m.Baseline}
	if m.Baseline == BaselineSystemRO {
		rs.Interpreters = append([]string(nil), elfInterpreters...)
	}
	if err := rs.build(intents); err != nil {
		return nil, err
	}
	return rs, nil
}

func (rs *Ruleset) build(intents []Intent) error {
	rs.Intents = intents
	rs.Files, rs.Exec, rs.Net, rs.RawSockets = nil, nil, nil, false
	rs.files, rs.exec = pathIndex{}, pathIndex{}
	rs.Libraries = nil
	if rs.Baseline == BaselineSystemRO {
		for _, d := range libraryDirs {
			pat, err := ParsePathPattern(d)
			if err != nil {
				return fmt.Errorf("policy: bad library directory %s: %w", d, err)
			}
			rs.Libraries = append(rs.Libraries, rs.atLinks(pat)...)
		}
	}
	fileRules := map[PathPattern]*PathRule{}
	execRules := map[PathPattern]*PathRule{}
	for i, in := range intents {
		switch in.Object.Type {
		case ObjFile:
			if err := checkCompilable(in); err != nil {
				return err
			}
			for _, pat := range rs.atLinks(in.Object.Path) {
				mergeRule(fileRules, pat, in.Predicate, i)
				rs.files.add(pat, in.Predicate, i)
			}
		case ObjProc:
			if err := checkCompilable(in); err != nil {
				return err
			}
			for _, pat := range rs.atLinks(in.Object.Path) {
				mergeRule(execRules, pat, Provides, i)
				rs.exec.add(pat, Provides, i)
				// What may be executed may be read: the kernel reads a
				// binary, an interpreter reads its script.
				mergeRule(fileRules, pat, Consumes, i)
				rs.files.add(pat, Consumes, i)
			}
		case ObjNet:
			if in.Object.Net.Raw {
				rs.RawSockets = true
			}
			r := NetRule{Pattern: in.Object.Net, Access: AccessOf(in.Predicate), Intent: i}
			rs.Net = append(rs.Net, r)
			for _, a := range hostAddrs(rs.hosts[r.Pattern.Host], rs.answers[r.Pattern.Host]) {
				p := r.Pattern
				p.Host, p.Prefix = "", netip.PrefixFrom(a, a.BitLen())
				rs.Net = append(rs.Net, NetRule{Pattern: p, Access: r.Access, Intent: i})
			}
		default:
			return fmt.Errorf("%w: intent %d has no object", ErrInvalidManifest, i)
		}
	}
	rs.netIdx = buildNetIndex(rs.Net)
	rs.Files = sortedRules(fileRules)
	rs.Exec = sortedRules(execRules)
	return nil
}

func checkCompilable(in Intent) error {
	if p := in.Object.Path.Path; p == "" || p[0] != '/' {
		return fmt.Errorf("%w: %s is not absolute (unexpanded ${workdir}?)", ErrInvalidManifest, in)
	}
	return nil
}

func mergeRule(m map[PathPattern]*PathRule, pat PathPattern, p Predicate, i int) {
	r := m[pat]
	if r == nil {
		r = &PathRule{Pattern: pat}
		m[pat] = r
	}
	r.Access |= AccessOf(p)
	r.Grants |= Grants(p)
	r.Intents = append(r.Intents, i)
}

func sortedRules(m map[PathPattern]*PathRule) []PathRule {
	out := make([]PathRule, 0, len(m))
	for _, r := range m {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pattern.Path != out[j].Pattern.Path {
			return out[i].Pattern.Path < out[j].Pattern.Path
		}
		return out[i].Pattern.Match < out[j].Pattern.Match
	})
	return out
}

// With returns a copy of the ruleset with more intents (marked Origin
// "lease" when they have none): permissive mode amends its scope this way.
func (rs *Ruleset) With(more ...Intent) (*Ruleset, error) {
	n := *rs
	intents := append(append([]Intent(nil), rs.Intents...), more...)
	for i := len(rs.Intents); i < len(intents); i++ {
		if intents[i].Origin == "" {
			intents[i].Origin = "lease"
		}
	}
	if err := n.build(intents); err != nil {
		return nil, err
	}
	return &n, nil
}

// Resolve returns a copy in which every host-name NET rule is followed by
// one rule per address lookup returns (same intent, same ports); the
// addresses stay with the ruleset, so With keeps them. A lookup error is
// an error of Resolve: a declared host the enforcer cannot wall in must
// not silently become "no rule". A lookup that returns no addresses and
// no error opens nothing at start: the caller has said the name gets its
// addresses later (WithHostAddrs, a session's DNS proxy). Wildcard hosts
// ("*.example.com") are not looked up: they get addresses from
// WithHostAddrs only.
func (rs *Ruleset) Resolve(lookup func(host string) ([]netip.Addr, error)) (*Ruleset, error) {
	hosts := map[string][]netip.Addr{}
	for _, r := range rs.Net {
		h := r.Pattern.Host
		if h == "" || hosts[h] != nil || r.Pattern.IsWildcard() {
			// A wildcard has no addresses to look up: only the names the
			// session's DNS proxy answers for it have.
			continue
		}
		addrs, err := lookup(h)
		if err != nil {
			return nil, fmt.Errorf("resolve %s (from %s): %w", h, rs.Intents[r.Intent], err)
		}
		// Looked up, even with nothing to open at start (the caller's
		// choice: a name its DNS proxy resolves when the agent asks).
		hosts[h] = []netip.Addr{}
		for _, a := range addrs {
			hosts[h] = append(hosts[h], a.Unmap())
		}
	}
	n := *rs
	n.hosts = hosts
	if err := n.build(rs.Intents); err != nil {
		return nil, err
	}
	return &n, nil
}

// LookedUp reports whether Resolve looked host up (it may have found
// nothing to open at start: a session's DNS proxy opens its answers).
func (rs *Ruleset) LookedUp(host string) bool {
	_, ok := rs.hosts[host]
	return ok
}

// hostAddrs is start followed by the answers not among them.
func hostAddrs(start, answers []netip.Addr) []netip.Addr {
	if len(answers) == 0 {
		return start
	}
	out := append([]netip.Addr(nil), start...)
	for _, a := range answers {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// WithHostAddrs returns a copy in which each declared host pattern of
// answers (an exact name or a "*." wildcard, as the intent wrote it) has
// these addresses besides what Resolve found for it: the addresses the
// session's DNS proxy answered and whose TTL has not run out. It replaces
// the previous call's answers; a pattern absent from answers keeps only
// what Resolve found.
func (rs *Ruleset) WithHostAddrs(answers map[string][]netip.Addr) (*Ruleset, error) {
	n := *rs
	n.answers = make(map[string][]netip.Addr, len(answers))
	for h, addrs := range answers {
		for _, a := range addrs {
			n.answers[h] = append(n.answers[h], a.Unmap())
		}
	}
	if err := n.build(rs.Intents); err != nil {
		return nil, err
	}
	return &n, nil
}

// OriginDNS marks the intents WithResolvers adds.
const OriginDNS = "baseline:dns"

// WithResolvers returns rs with DNS (port 53, UDP and TCP) to each of
// servers allowed, when some NET intent names a host: declaring a host name
// implies looking it up, and the agent's resolver asks these servers
// first. The intents' origin is OriginDNS (the log groups them with the
// baseline). Without a host name in the NET intents it returns rs.
func (rs *Ruleset) WithResolvers(servers []netip.Addr) (*Ruleset, error) {
	named := false
	for _, r := range rs.Net {
		named = named || r.Pattern.Host != ""
	}
	if !named || len(servers) == 0 {
		return rs, nil
	}
	var more []Intent
	for _, a := range servers {
		for _, proto := range []string{"udp", "tcp"} {
			in, err := ParseIntent("CONSUMES NET:" + netip.AddrPortFrom(a.Unmap(), 53).String() + "/" + proto)
			if err != nil {
				return nil, fmt.Errorf("resolver %s: %w", a, err)
			}
			in.Origin = OriginDNS
			more = append(more, in)
		}
	}
	return rs.With(more...)
}

// DeclaresMutates reports whether some FILE intent that is not the
// baseline's (the manifest's own, or a lease) grants MUTATES: whether the
// agent may change any file at all. The baseline's MUTATES are root's
// device sinks (/dev/null), whose metadata the agent cannot change.
func (rs *Ruleset) DeclaresMutates() bool {
	for _, in := range rs.Intents {
		if in.Object.Type == ObjFile && Grants(in.Predicate)&AccessOf(Mutates) != 0 && !isBaselineOrigin(in.Origin) {
			return true
		}
	}
	return false
}

func isBaselineOrigin(origin string) bool { return strings.HasPrefix(origin, "baseline:") }

// Writable is what lets the agent put its own bytes at a path: create,
// change or rename onto it.
var Writable = AccessOf(Provides, Mutates, Renames)

// MapsExec reports whether the agent may map path's file executable
// (mmap or mprotect with PROT_EXEC): running its code without an exec. A
// PROC intent that lets it run allows it; so does a baseline library
// directory (Libraries), unless the rules let the agent write, create or
// rename the file there (its own code in a library directory is no
// library of the system's).
func (rs *Ruleset) MapsExec(path string) bool {
	if rs.Allows(ExecTriple(path)).Allowed {
		return true
	}
	in := false
	for _, l := range rs.Libraries {
		if l.Covers(path) {
			in = true
			break
		}
	}
	if !in {
		return false
	}
	for _, p := range Predicates() {
		if Writable.Has(p) && rs.Allows(FileTriple(p, path)).Allowed {
			return false
		}
	}
	return true
}
