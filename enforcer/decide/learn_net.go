package decide

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// The kernel reports where the agent connected: an address. The agent
// asked for a name (registry.example.org), and the address behind it
// changes (a CDN, a fail-over); learned as the address, the next run
// would be refused as soon as it does. So a learning run also records the
// names the agent looked up and what they answered (Lookup: the DNS
// answers klock forwarded, the hosts file), and --learn declares the name
// wherever an address it connected to was one of the answers, the address
// only where no name answered it. Declaring a name implies asking the
// name servers (policy.Ruleset.WithResolvers), so the agent's DNS traffic
// itself is then not learned.

// NameSource says where an answer to a name lookup came from.
type NameSource uint8

const (
	// FromDNS: an answer of a name server to the agent's own query.
	FromDNS NameSource = iota
	// FromHosts: a line of the hosts file (/etc/hosts), which the C
	// library reads before it asks a name server; used only when the agent
	// read that file, and never for loopback addresses (127.0.0.1 is
	// "localhost" to everyone, whatever the agent connected to it by).
	FromHosts
)

// WithNameServers tells the engine the name servers the agent's resolver
// asks (the nameserver lines of /etc/resolv.conf): --learn does not learn
// the agent's DNS traffic to them when it learns a name, since a declared
// name implies it.
func WithNameServers(addrs []netip.Addr) Option {
	return func(e *Engine) {
		for _, a := range addrs {
			e.nameServers = append(e.nameServers, a.Unmap())
		}
	}
}

// Lookup records that a lookup of host answered addrs. It does not decide
// anything: connections are decided when they happen, as they are.
func (e *Engine) Lookup(host string, addrs []netip.Addr, src NameSource) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" || len(addrs) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.names == nil {
		e.names = map[NameSource]map[netip.Addr][]string{}
	}
	m := e.names[src]
	if m == nil {
		m = map[netip.Addr][]string{}
		e.names[src] = m
	}
	for _, a := range addrs {
		a = a.Unmap()
		if src == FromHosts && a.IsLoopback() {
			continue
		}
		if !containsString(m[a], host) {
			m[a] = append(m[a], host)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// netNames is what Learned knows of the names behind addresses.
type netNames struct {
	byAddr      map[netip.Addr][]string // names in the order they were first looked up
	nameServers []netip.Addr
}

// learnNames snapshots the names the run looked up: DNS answers, and the
// hosts file's when the agent read it and DNS did not answer the address.
// Call with e.mu held.
func (e *Engine) learnNames() netNames {
	n := netNames{byAddr: map[netip.Addr][]string{}, nameServers: e.nameServers}
	for a, names := range e.names[FromDNS] {
		n.byAddr[a] = names
	}
	if o := e.obs[policy.FileTriple(policy.Consumes, "/etc/hosts")]; o != nil && o.Count > o.Failed {
		for a, names := range e.names[FromHosts] {
			if n.byAddr[a] == nil {
				n.byAddr[a] = names
			}
		}
	}
	return n
}

// discardOnly (RFC 6666's 100::/64) stands for a declared host the run did
// not look up, in the check of the learned manifest: no triple reaches it.
var discardOnly = netip.MustParseAddr("100::")

// lookup answers a host's addresses as the run saw them, for checking the
// learned manifest.
func (n netNames) lookup(host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for a, names := range n.byAddr {
		if containsString(names, host) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return []netip.Addr{discardOnly}, nil
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out, nil
}

// nameHosts takes the NET triples of need that connected to an address a
// name answered and returns their intents by name (one per name, port and
// protocol), and the rest of need. When a name is learned or declared
// (declaredHost), the agent's DNS traffic to a name server is dropped
// from need: the name implies it.
func nameHosts(need []learnObs, names netNames, declaredHost bool) (named []learnedIntent, rest []learnObs) {
	seenIntent := map[string]int{}
	for _, o := range need {
		t := o.t
		addrNames := names.byAddr[t.Addr.Addr().Unmap()]
		if t.Type != policy.ObjNet || t.Raw || t.Host != "" || !t.Addr.Addr().IsValid() || len(addrNames) == 0 {
			rest = append(rest, o)
			continue
		}
		for _, h := range addrNames {
			n := policy.NetPattern{Host: h, Ports: policy.PortRange{Lo: t.Addr.Port(), Hi: t.Addr.Port()}, Proto: t.Proto}
			obj := "NET:" + n.String()
			if i, ok := seenIntent[t.Predicate.String()+obj]; ok {
				named[i].comment += ", " + t.Addr.Addr().Unmap().String()
				continue
			}
			seenIntent[t.Predicate.String()+obj] = len(named)
			named = append(named, learnedIntent{pred: t.Predicate, typ: policy.ObjNet, obj: obj,
				comment: fmt.Sprintf("learned: looked up by the agent, %s; answered %s", strings.TrimPrefix(seen(o.count), "learned: "), t.Addr.Addr().Unmap())})
		}
	}
	if len(named) == 0 && !declaredHost {
		return nil, rest
	}
	kept := rest[:0]
	for _, o := range rest {
		if !names.isNameServer(o.t) {
			kept = append(kept, o)
		}
	}
	return named, kept
}

// isNameServer: t is DNS to one of the name servers.
func (n netNames) isNameServer(t policy.Triple) bool {
	if t.Type != policy.ObjNet || t.Predicate != policy.Consumes || t.Addr.Port() != 53 {
		return false
	}
	a := t.Addr.Addr().Unmap()
	for _, s := range n.nameServers {
		if s == a {
			return true
		}
	}
	return false
}

// declaresHost: some NET intent of m names a host.
func declaresHost(m *policy.Manifest) bool {
	for _, in := range m.Intents {
		if in.Object.Type == policy.ObjNet && in.Object.Net.Host != "" {
			return true
		}
	}
	return false
}

// SetHostAddrs gives the declared host patterns the addresses the
// session's DNS proxy answered for them and whose TTL has not run out
// (policy.Ruleset.WithHostAddrs): from now on a connection to one of them
// is judged as the intent of the pattern; what Resolve found at start
// stays. It replaces the previous call's answers and keeps every lease.
func (e *Engine) SetHostAddrs(answers map[string][]netip.Addr) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	rs, err := e.rs.WithHostAddrs(answers)
	if err != nil {
		return err
	}
	e.setRuleset(rs)
	return nil
}
