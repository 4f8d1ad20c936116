//go:build linux

package session

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/dnsproxy"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/netguard"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/netnsdo"
	"github.com/klocklabs/klock/policy"
	"github.com/miekg/dns"
)

// DNSGrace is how long an answered address stays in the session's allow
// rules after its TTL ran out: resolvers and runtimes that cache an
// answer a little longer than its TTL still reach it.
const DNSGrace = 30 * time.Second

// maxDNSTTL caps how long one answer keeps its addresses open.
const maxDNSTTL = 24 * time.Hour

// dnsScope is a session's DNS proxy and the addresses its answers opened.
// Its address is chosen, and the resolv.conf naming it written, before
// anything else; the proxy itself listens in the session's network
// namespace (listenIn), made before the agent runs; the engine and the
// wall come later (attach): answers before that (none from the agent,
// which does not run yet) wait for attach.
type dnsScope struct {
	// address is the proxy's, port 53, in the session's namespace.
	address    netip.Addr
	hosts      []string
	resolvConf string // the file stage 2 binds over the agent's /etc/resolv.conf
	upstreams  []string
	refused    chan event.Event
	stop       chan struct{}
	stopOnce   sync.Once
	now        func() time.Time
	// peer: a declared host pattern -> its first CONSUMES rule, whose
	// ports and protocol a withheld answer's refusal names.
	peer map[string]policy.NetPattern
	// declared: the manifest's address prefixes, which an answer may
	// point into whatever their range.
	declared []netip.Prefix

	// ready is closed by attach: an answer waits for it, so its
	// addresses are in the engine and the wall before the agent reads it.
	ready     chan struct{}
	readyOnce sync.Once
	// group is the session's cgroup (setGroup): only its sockets' queries
	// are served; peerWarned logs once that the kernel could not say.
	group      *cgroup.Group
	peerWarned sync.Once
	log        *slog.Logger

	mu sync.Mutex
	// proxy listens in the session's namespace (nil until listenIn).
	proxy *dnsproxy.Proxy
	eng   *decide.Engine
	wall  *netWall
	// net is the session's own namespace's wall and relays (setNet): the
	// answers open the packet wall too (and a relay for a loopback
	// answer).
	net *sessionNet
	// live: declared pattern -> answered address -> when it leaves the rules.
	live map[string]map[netip.Addr]time.Time
}

// netWall serializes the updates of the cgroup-net rules: permissive
// widening and DNS answers each write the engine's current ruleset, and
// the last to write must write the latest.
type netWall struct {
	mu  sync.Mutex
	ngs *netguard.Session
	eng *decide.Engine
}

func (w *netWall) sync() error {
	if w == nil || w.ngs == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ngs.Update(w.eng.Ruleset())
}

// declaredHosts are the host patterns of rs's CONSUMES NET rules.
func declaredHosts(rs *policy.Ruleset) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rs.Net {
		if h := r.Pattern.Host; h != "" && !seen[h] && r.Access.Has(policy.Consumes) {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}

// proxyAddr is the session's DNS proxy's address, 127.77.x.y from the
// session id: on the loopback of the session's own network namespace,
// where nothing else listens, so any address there would do; one that
// names the session reads better in a resolv.conf.
func proxyAddr(id string) netip.Addr {
	h := fnv.New32a()
	h.Write([]byte(id))
	v := h.Sum32()
	return netip.AddrFrom4([4]byte{127, 77, byte(v >> 8), byte(v%254) + 1})
}

// startDNS chooses the session's proxy address for rs's declared host
// names and writes the resolv.conf naming it into dir; the proxy listens
// once the session's namespace exists (listenIn). Nothing listens on the
// host: a resolver the host runs on port 53 (0.0.0.0:53 included) is no
// conflict.
func startDNS(id, dir string, rs *policy.Ruleset, upstreams []string, log *slog.Logger) (*dnsScope, error) {
	d := &dnsScope{refused: make(chan event.Event, 256), stop: make(chan struct{}), now: time.Now,
		live: map[string]map[netip.Addr]time.Time{}, upstreams: upstreams, ready: make(chan struct{}), log: log,
		address: proxyAddr(id), hosts: declaredHosts(rs),
		peer: map[string]policy.NetPattern{}, declared: rs.DeclaredPrefixes()}
	if d.log == nil {
		d.log = slog.Default()
	}
	for _, r := range rs.Net {
		if h := r.Pattern.Host; h != "" && r.Access.Has(policy.Consumes) {
			if _, ok := d.peer[h]; !ok {
				d.peer[h] = r.Pattern
			}
		}
	}
	if len(upstreams) == 0 {
		return nil, errors.New("the session's DNS proxy: no upstream resolvers (the host's resolv.conf names none)")
	}
	d.resolvConf = filepath.Join(dir, "resolv-"+id+".conf")
	body := "# klock session " + id + ": its DNS proxy, which answers the declared host names only\nnameserver " + d.address.String() + "\n"
	if err := os.WriteFile(d.resolvConf, []byte(body), 0o644); err != nil {
		d.close()
		return nil, fmt.Errorf("the session's resolv.conf: %w", err)
	}
	// The agent's user reads it through the bind mount; the mode the
	// umask left may be narrower.
	if err := os.Chmod(d.resolvConf, 0o644); err != nil {
		d.close()
		return nil, fmt.Errorf("the session's resolv.conf: %w", err)
	}
	go d.expire()
	return d, nil
}

// listenIn starts the proxy on its address, port 53 (UDP and TCP), in
// the network namespace at path (the agent's, made by stage 2: netNSPath),
// replacing one listening in an earlier stage 2's. Its sockets are made there, by a
// thread moved into the namespace; it serves them from klock's own
// threads, which forward to the upstreams from the host's namespace.
func (d *dnsScope) listenIn(path string) error {
	if d == nil {
		return nil
	}
	addr := netip.AddrPortFrom(d.address, 53).String()
	var pc net.PacketConn
	var ln net.Listener
	err := inNetNS(path, func() error {
		if err := netnsdo.LoopbackUp(); err != nil { // stage 2 and the packet wall bring lo up too: whichever comes first
			return err
		}
		var err error
		if pc, err = net.ListenPacket("udp4", addr); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp4", addr); err != nil {
			pc.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the session's DNS proxy on %s in the session's network namespace: %w", addr, err)
	}
	p, err := dnsproxy.Start(dnsproxy.Config{PacketConn: pc, Listener: ln, Upstreams: d.upstreams, Hosts: d.hosts,
		Declared: d.declared, Local: d.link, OnAnswer: d.answered, OnRefused: d.refuse, OnRebinding: d.rebinding,
		Client: d.fromSession})
	if err != nil {
		pc.Close()
		ln.Close()
		return fmt.Errorf("the session's DNS proxy: %w", err)
	}
	d.mu.Lock()
	old := d.proxy
	d.proxy = p
	d.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return nil
}

// addr is the proxy's address, the only name server the agent may reach.
func (d *dnsScope) addr() netip.Addr { return d.address }

// setGroup names the session's cgroup, before the agent starts in it.
func (d *dnsScope) setGroup(g *cgroup.Group) {
	d.mu.Lock()
	d.group = g
	d.mu.Unlock()
}

// setNet names the session's namespace plumbing, before the agent runs.
func (d *dnsScope) setNet(n *sessionNet) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.net = n
	d.mu.Unlock()
}

// fromSession says whether a query is the session's: the proxy listens
// on the loopback of the session's own network namespace, which only the
// session's processes share (stage 2 and the agent's), so every client
// is, once the agent can run (its cgroup named).
func (d *dnsScope) fromSession(string, net.Addr) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.group != nil
}

// attach starts feeding answers to the engine and the wall.
func (d *dnsScope) attach(eng *decide.Engine, wall *netWall) {
	d.mu.Lock()
	d.eng, d.wall = eng, wall
	if len(d.live) > 0 {
		_ = d.applyLocked()
	}
	d.mu.Unlock()
	d.readyOnce.Do(func() { close(d.ready) })
}

// answered opens the answer's addresses (for the matched pattern's
// intents: their ports and protocol) until TTL + DNSGrace, before the
// proxy tells the agent.
func (d *dnsScope) answered(a dnsproxy.Answer) error {
	// The agent runs before the engine exists (launch, then the engine):
	// an answer waits until its addresses can be allowed.
	select {
	case <-d.ready:
	case <-d.stop:
		return errors.New("the session is over")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	until := d.now().Add(min(a.TTL, maxDNSTTL) + DNSGrace)
	m := d.live[a.Pattern]
	if m == nil {
		m = map[netip.Addr]time.Time{}
		d.live[a.Pattern] = m
	}
	var added []netip.Addr
	for _, ip := range a.Addrs {
		if old, ok := m[ip]; !ok {
			added = append(added, ip)
		} else if old.After(until) {
			continue
		}
		m[ip] = until
	}
	if d.eng != nil {
		d.eng.Lookup(a.Name, a.Addrs, decide.FromDNS)
	}
	// The packet wall's entries expire on their own: renewed with every
	// answer.
	if err := d.net.answered(a.Pattern, a.Addrs, until.Sub(d.now())); err != nil {
		for _, ip := range added {
			delete(m, ip)
		}
		return err
	}
	if len(added) == 0 {
		return nil
	}
	if err := d.applyLocked(); err != nil {
		for _, ip := range added {
			delete(m, ip)
		}
		_ = d.applyLocked()
		return err
	}
	return nil
}

// applyLocked writes the live answers to the engine and the wall.
func (d *dnsScope) applyLocked() error {
	if d.eng == nil {
		return nil
	}
	hosts := map[string][]netip.Addr{}
	for p, m := range d.live {
		for ip := range m {
			hosts[p] = append(hosts[p], ip)
		}
	}
	if err := d.eng.SetHostAddrs(hosts); err != nil {
		return err
	}
	return d.wall.sync()
}

// expire takes addresses out of the rules once their TTL and grace ran out.
func (d *dnsScope) expire() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		d.mu.Lock()
		now, gone := d.now(), false
		for p, m := range d.live {
			for ip, until := range m {
				if now.After(until) {
					delete(m, ip)
					gone = true
				}
			}
			if len(m) == 0 {
				delete(d.live, p)
			}
		}
		if gone {
			_ = d.applyLocked()
		}
		d.mu.Unlock()
	}
}

// refuse reports a refused name to the session's loop as the triple
// CONSUMES NET:<name>:53/<the transport the query came on>, which no
// intent covers.
func (d *dnsScope) refuse(r dnsproxy.Refusal) {
	name := strings.ToLower(r.Name)
	if !dnsproxy.ValidName(name) {
		// Not a host name an intent could declare: named for the log,
		// the name as asked in the record's syscall.
		name = "malformed.invalid"
		r.Why += " " + strconv.Quote(r.Name)
	}
	ev := event.Event{Time: d.now(), Source: event.SourceDNSProxy, Blocked: true,
		Syscall: "dns query " + qtypeName(r.Qtype) + " (refused: " + r.Why + ")",
		Triple: policy.Triple{Predicate: policy.Consumes, Type: policy.ObjNet, Host: name,
			Addr: netip.AddrPortFrom(netip.Addr{}, 53), Proto: dnsProto(r.Network)}}
	d.report(ev)
}

// rebinding reports an answered address the proxy withheld (the name
// pointed into the host, its link or a private range) as the connection
// it would have opened: CONSUMES NET:<address>:<the name's port>/<proto>,
// which no intent covers (a declared address is not withheld), the name
// and why in the record's syscall.
func (d *dnsScope) rebinding(r dnsproxy.Rebinding) {
	pat := d.peer[r.Pattern]
	port := pat.Ports.Lo // one port, the first of a range; 0 for "*"
	if pat.Ports == policy.AllPorts {
		port = 0
	}
	ev := event.Event{Time: d.now(), Source: event.SourceDNSProxy, Blocked: true,
		Syscall: "dns answer " + qtypeName(r.Qtype) + " " + r.Name + " over " + r.Network + ": " + r.Addr.String() +
			" withheld (rebinding: " + r.Why + "; declare the address in a NET intent to allow it)",
		Triple: policy.NetTriple(policy.Consumes, netip.AddrPortFrom(r.Addr, port), pat.Proto)}
	d.report(ev)
}

func (d *dnsScope) report(ev event.Event) {
	select {
	case d.refused <- ev:
	case <-d.stop:
	}
}

// link are the addresses of the session's veth pair (none before the
// namespace is up): answers must not point at them, whatever their range.
func (d *dnsScope) link() []netip.Addr {
	d.mu.Lock()
	n := d.net
	d.mu.Unlock()
	if n == nil || n.wall == nil {
		return nil
	}
	out := []netip.Addr{n.wall.Addr, n.wall.HostAddr}
	if n.wall.Addr6.IsValid() {
		out = append(out, n.wall.Addr6, n.wall.HostAddr6)
	}
	return out
}

func dnsProto(network string) policy.Proto {
	if network == "tcp" {
		return policy.ProtoTCP
	}
	return policy.ProtoUDP
}

func qtypeName(t uint16) string {
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// close stops the proxy and removes its resolv.conf; the agent is gone.
func (d *dnsScope) close() {
	if d == nil {
		return
	}
	d.stopOnce.Do(func() { close(d.stop) })
	d.mu.Lock()
	p := d.proxy
	d.mu.Unlock()
	if p != nil {
		// Not under mu: Close waits for the queries in flight, whose
		// answers take it.
		_ = p.Close()
	}
	if d.resolvConf != "" {
		_ = os.Remove(d.resolvConf)
	}
}

// conf is the file to bind over the agent's /etc/resolv.conf ("" without
// a proxy).
func (d *dnsScope) conf() string {
	if d == nil || !hostHasResolvConf() {
		return ""
	}
	return d.resolvConf
}

// hostHasResolvConf: the host has an /etc/resolv.conf (or the file its
// link names) to bind the proxy's over. A host without one has no name
// server (the C library would ask 127.0.0.1:53, which the wall refuses):
// the agent resolves through /etc/hosts only, as it would without klock.
func hostHasResolvConf() bool {
	_, err := os.Stat(resolvConf)
	return err == nil
}

func (d *dnsScope) confDetail() string {
	if !hostHasResolvConf() {
		return "this host has no " + resolvConf + ": the agent has no name server (it resolves through /etc/hosts), and port 53 is open to the session's DNS proxy (" + d.addr().String() + " in the session's network namespace) alone"
	}
	return "the agent's /etc/resolv.conf names only " + d.addr().String() + ", the session's DNS proxy, listening in the session's own network namespace (nothing of it on the host's addresses), and port 53 is open to it alone"
}

// backend is the proxy's entry in the verification log.
func (d *dnsScope) backend() vlog.Backend {
	return vlog.Backend{Name: "dns-proxy", Guarantee: vlog.GuaranteeBlocks, Details: []string{
		d.confDetail(),
		"declared host names (exact, or under a *. wildcard) are asked of " + strings.Join(d.upstreams, ", ") + " in a query of the proxy's own (the name in lower case, nothing else of the agent's message), and answered with the question's records only; each answer's addresses are allowed on the matched intent's ports for the answer's TTL (at most " + dnsproxy.MaxTTL.String() + ") + " + DNSGrace.String(),
		"every other name, ANY and malformed queries are answered REFUSED and never forwarded: CONSUMES NET:<name>:53/<udp or tcp>",
		"an answer's loopback, link-local, private, metadata and this host's (or the session link's) addresses are withheld from the agent unless the manifest declares them: CONSUMES NET:<address>:<port>/<proto>" + declaredNote(d.declared),
	}}
}

func declaredNote(declared []netip.Prefix) string {
	if len(declared) == 0 {
		return ""
	}
	var ps []string
	for _, p := range declared {
		if p.IsSingleIP() {
			ps = append(ps, p.Addr().String())
		} else {
			ps = append(ps, p.String())
		}
	}
	return " (declared: " + strings.Join(ps, ", ") + ")"
}
