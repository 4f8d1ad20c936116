//go:build linux

package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/looprelay"
	"github.com/klocklabs/klock/enforcer/netwall"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// A session with NET intents (not observe-only, not a container's) runs
// in a network namespace of its own (stage 2's, launch.Spec.NewNetNS),
// joined to the host by netwall's veth pair and nftables table: the packet
// wall behind cgroup-net. Declared peers on the host's loopback are
// relayed into the namespace (looprelay); the session's DNS proxy listens
// in the namespace itself (dns.go). netPlan says, from the ruleset, what
// goes where.

// via names the path of a peer's traffic in the log.
const (
	viaWall  = "packet wall"
	viaRelay = "loopback relay"
)

// netPeer is one declared peer of the session.
type netPeer struct {
	name string // "NET:<pattern>"
	via  string
}

// netPlan is what a session's namespace needs from its ruleset.
type netPlan struct {
	cfg netwall.Config
	// relays: loopback peers relayed from the start.
	relays []relayPeer
	// start: the addresses Resolve found for a host peer (its name ->
	// them), allowed until the end.
	start map[string][]netip.Addr
	// hosts: a declared host pattern -> its peers (one per rule), for the
	// DNS proxy's answers.
	hosts map[string][]hostPeer
	peers []netPeer
	// unreachable says, per peer the namespace cannot reach, why.
	unreachable []string
	// raw: NET:raw is declared: the agent's group may open ping sockets
	// in the namespace (pingGID, set by prepare), and the wall lets their
	// echo requests reach the peers' addresses (cfg.PingPeer).
	raw     bool
	pingGID uint32
	// reportRelay: the relay reports the connects it answers itself
	// (looprelay.Report) on sessionNet.relayed, for the session's engine:
	// under bpf-lsm, whose session has no syscall tracepoint, nothing
	// else would (prepare sets it).
	reportRelay bool
}

// rawPeer is NET:raw's name in the log: the pings' counters.
const rawPeer = "NET:raw"

type relayPeer struct {
	name  string
	addr  netip.Addr
	ports policy.PortRange
	proto policy.Proto
}

type hostPeer struct {
	name  string
	ports policy.PortRange
	proto policy.Proto
}

// planNet sorts the CONSUMES NET rules of rs into wall peers, loopback
// relays and host peers. dnsProxy is the session's DNS proxy's address
// (invalid: none): it listens in the namespace, nothing relays it.
func planNet(rs *policy.Ruleset, budget uint64, dnsProxy netip.Addr) netPlan {
	p := netPlan{start: map[string][]netip.Addr{}, hosts: map[string][]hostPeer{}}
	p.cfg.MaxEgressBytes = budget
	seen := map[string]bool{}
	peer := func(name, via string) {
		if !seen[name] {
			seen[name] = true
			p.peers = append(p.peers, netPeer{name, via})
		}
	}
	for _, r := range rs.Net {
		pat := r.Pattern
		if !r.Access.Has(policy.Consumes) || pat.Raw {
			continue
		}
		if pat.Host != "" {
			name := "NET:" + pat.String()
			p.hosts[pat.Host] = append(p.hosts[pat.Host], hostPeer{name, pat.Ports, pat.Proto})
			if !seen[name] {
				p.cfg.Peers = append(p.cfg.Peers, netwall.Peer{Name: name, Ports: pat.Ports, Proto: pat.Proto})
			}
			peer(name, viaWall)
			continue
		}
		// An address rule Resolve expanded from a host rule belongs to
		// that host's peer.
		if r.Intent < len(rs.Intents) {
			if h := rs.Intents[r.Intent].Object.Net.Host; h != "" {
				hp := pat
				hp.Host, hp.Prefix = h, netip.Prefix{}
				name := "NET:" + hp.String()
				a := pat.Prefix.Addr()
				if a.IsLoopback() {
					p.relays = append(p.relays, relayPeer{name, a, pat.Ports, pat.Proto})
				} else {
					p.start[name] = append(p.start[name], a)
				}
				continue
			}
		}
		name := "NET:" + pat.String()
		a := pat.Prefix.Addr()
		switch {
		case dnsProxy.IsValid() && a.Unmap() == dnsProxy && pat.Prefix.IsSingleIP() && pat.Ports == (policy.PortRange{Lo: 53, Hi: 53}):
			// The session's DNS proxy, there already.
		case a.IsLoopback() && pat.Prefix.IsSingleIP():
			p.relays = append(p.relays, relayPeer{name, a, pat.Ports, pat.Proto})
			peer(name, viaRelay)
		case a.IsLoopback():
			p.unreachable = append(p.unreachable, name+": a loopback range is not relayed (name one address): unreachable from the session's namespace")
		default:
			if !seen[name] {
				p.cfg.Peers = append(p.cfg.Peers, netwall.Peer{Name: name, Prefix: pat.Prefix, Ports: pat.Ports, Proto: pat.Proto})
			}
			peer(name, viaWall)
		}
	}
	if rs.RawSockets {
		p.raw = true
		p.cfg.PingPeer = rawPeer
		peer(rawPeer, viaWall)
	}
	return p
}

// sessionNet is a running session's namespace plumbing.
type sessionNet struct {
	id    string
	plan  netPlan
	log   *slog.Logger
	wall  *netwall.Wall
	relay *looprelay.Relay

	// relayOver is told when the relay reached its share of the egress
	// budget (it holds the flow; the budget's watcher checks at once).
	relayOver chan struct{}
	// relayed: the connects the relay answered itself (plan.reportRelay;
	// nil without), read by the session's loop; stop lets a report go
	// once the session no longer reads them (close).
	relayed  chan event.Event
	stop     chan struct{}
	stopOnce sync.Once
	// pingErr: why the agent's group could not be let open ping sockets
	// (NET:raw declared), for the log.
	pingErr error

	mu sync.Mutex
	// notRelayed: loopback peers (or answers) the relay could not serve.
	notRelayed []string
	// amended: loopback peers a permissive amendment relayed.
	amended []netPeer
	// handing: the relay answers the agent's connect calls (HandOff);
	// copyWhy: why it does not, when the session asked it to.
	handing bool
	copyWhy string
	// unrouted: declared IPv6 peers the session cannot reach, and why
	// (netns6.go); noV6Answers: the host peers already noted there.
	unrouted    []string
	noV6Answers map[string]bool
}

// setupNet builds the wall around pid's network namespace and the relays
// into it. On error nothing is left behind.
func setupNet(ctx context.Context, id string, pid int, plan netPlan, log *slog.Logger) (_ *sessionNet, err error) {
	n := &sessionNet{id: id, plan: plan, log: log, relayOver: make(chan struct{}, 1), stop: make(chan struct{})}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	if n.wall, err = netwall.Setup(ctx, id, netwall.Target{Pid: pid}, plan.cfg); err != nil {
		return nil, err
	}
	n.checkIPv6()
	for name, addrs := range plan.start {
		for _, a := range addrs {
			if err := n.wall.AllowPeer(name, a, 0); err != nil && !errors.Is(err, netwall.ErrUnsupported) {
				return nil, err
			}
		}
	}
	var opts []looprelay.Option
	if plan.reportRelay {
		n.relayed = make(chan event.Event, relayedQueue)
		opts = append(opts, looprelay.Report(n.reportConnect))
	}
	if n.relay, err = looprelay.New(pid, opts...); err != nil {
		return nil, err
	}
	if plan.raw {
		// The agent has no CAP_NET_RAW: a ping socket is how it sends
		// an ICMP echo, and only the groups of the namespace's
		// ping_group_range may open one. A failure costs the agent its
		// pings, not a wall: logged, and the session goes on.
		if n.pingErr = allowPing(netNSPath(pid), plan.pingGID); n.pingErr != nil {
			log.Warn("NET:raw: the agent's group cannot open ping sockets", "error", n.pingErr)
		}
	}
	if b := plan.cfg.MaxEgressBytes; b > 0 {
		n.relay.SetBudget(b, func() {
			select {
			case n.relayOver <- struct{}{}:
			default:
			}
		})
	}
	for _, r := range plan.relays {
		// A relay that cannot listen (too wide, no IPv6 in the namespace)
		// leaves that peer unreachable: closed, and the log says so.
		if err := n.relay.Add(r.name, r.addr, r.ports, r.proto); err != nil {
			n.notRelayed = append(n.notRelayed, r.name+" ("+r.addr.String()+"): "+err.Error())
			if !errors.Is(err, looprelay.ErrTooWide) {
				log.Warn("a declared loopback peer is unreachable from the agent's network namespace", "peer", r.name, "error", err)
			}
		}
	}
	return n, nil
}

// relayedQueue is how many of the relay's reports wait for the session's
// loop before the agent's next connect the relay answers waits too (the
// loop starts after the agent does).
const relayedQueue = 256

// reportConnect queues a connect the relay answered for the session's
// loop; the agent's call waits until it is queued, so its report is in
// before the agent can act on the answer (or exit).
func (n *sessionNet) reportConnect(ev event.Event) {
	select {
	case n.relayed <- ev:
	case <-n.stop:
	}
}

// answered opens what the DNS proxy answered for a declared host pattern:
// on the wall (IPv4) until ttl, or through a relay (a loopback answer).
func (n *sessionNet) answered(pattern string, addrs []netip.Addr, ttl time.Duration) error {
	if n == nil {
		return nil
	}
	var errs []error
	for _, hp := range n.plan.hosts[pattern] {
		for _, a := range addrs {
			a = a.Unmap()
			switch {
			case a.IsLoopback():
				if err := n.relay.Add(hp.name, a, hp.ports, hp.proto); errors.Is(err, looprelay.ErrTooWide) {
					n.mu.Lock()
					n.notRelayed = append(n.notRelayed, hp.name+" ("+a.String()+"): "+err.Error())
					n.mu.Unlock()
				} else if err != nil {
					errs = append(errs, err)
				}
			case a.Is4() || n.wall.Addr6.IsValid():
				if err := n.wall.AllowPeer(hp.name, a, ttl); err != nil {
					errs = append(errs, err)
				}
			default:
				// No IPv6 on this host: the agent's connect to the
				// AAAA answer fails (no route in its namespace), and
				// the log says why once.
				n.noIPv6Answer(hp.name, a)
			}
		}
	}
	return errors.Join(errs...)
}

// widen opens a permissive amendment's peer (the refused triple's
// address, port and protocol) on the packet wall, or through a relay for
// the host's loopback, as cgroup-net's rules are widened: the agent's
// retry goes through both walls. It is counted under "dns:<ports>/<proto>"
// (netwall.Allow's peers) or its triple.
func (n *sessionNet) widen(t policy.Triple) error {
	if n == nil || t.Raw || !t.Addr.Addr().IsValid() || t.Predicate != policy.Consumes || t.Addr.Port() == 0 {
		return nil // a name (the DNS proxy widens it), a bind, a raw socket: nothing to open
	}
	a := t.Addr.Addr().Unmap()
	ports := policy.PortRange{Lo: t.Addr.Port(), Hi: t.Addr.Port()}
	switch {
	case a.IsLoopback():
		name := "NET:" + policy.NetPattern{Prefix: netip.PrefixFrom(a, a.BitLen()), Ports: ports, Proto: t.Proto}.String()
		if err := n.relay.Add(name, a, ports, t.Proto); err != nil {
			return err
		}
		n.mu.Lock()
		n.amended = append(n.amended, netPeer{name, viaRelay})
		n.mu.Unlock()
		return nil
	case a.Is4() || n.wall.Addr6.IsValid():
		return n.wall.Allow(a, ports, t.Proto, 0)
	}
	return nil
}

// handOff serves the agent's connect listener: the relay hands declared
// host loopback services' connects a socket of the host's; without a
// relay (the namespace was not walled), every connect continues.
func (n *sessionNet) handOff(l *os.File) {
	if n == nil || n.relay == nil {
		looprelay.Passthrough(l)
		return
	}
	if err := n.relay.HandOff(l); err != nil {
		n.log.Warn("the loopback relay cannot answer the agent's connect calls", "error", err)
		looprelay.Passthrough(l)
		return
	}
	n.mu.Lock()
	n.handing = true
	n.mu.Unlock()
}

// copyOnly notes why the relay copies every flow although the session
// asked for the handoff.
func (n *sessionNet) copyOnly(why string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.copyWhy = why
	n.mu.Unlock()
}

// relayVia names the relay's path for a peer in the log: "addfd" when its
// connects were handed a socket of the host's, "copy" when copied.
func relayVia(c looprelay.Counts) string {
	switch {
	case c.Handed > 0 && c.Copied > 0:
		return viaRelay + " (addfd and copy)"
	case c.Handed > 0:
		return viaRelay + " (addfd)"
	case c.Copied > 0:
		return viaRelay + " (copy)"
	}
	return viaRelay
}

// counters are the wall's and the relays' counts for the log.
func (n *sessionNet) counters() (*vlog.Network, error) {
	out := &vlog.Network{MaxEgressBytes: n.plan.cfg.MaxEgressBytes}
	wc, err := n.wall.Counters()
	if err != nil {
		return nil, err
	}
	rc := n.relay.Counters()
	add := func(name, via string, c netwall.Counts) {
		out.Peers = append(out.Peers, vlog.PeerCounters{Peer: name, Via: via, OutPackets: c.OutPackets, OutBytes: c.OutBytes, InPackets: c.InPackets, InBytes: c.InBytes,
			OverBudgetPackets: c.OverPackets, OverBudgetBytes: c.OverBytes})
		if name != netwall.Dropped {
			out.OutBytes += c.OutBytes
			out.InBytes += c.InBytes
			out.AttemptedOutBytes += c.OutBytes + c.OverBytes
		}
	}
	n.mu.Lock()
	peers := append(append([]netPeer(nil), n.plan.peers...), n.amended...)
	n.mu.Unlock()
	seen := map[string]bool{}
	for _, p := range peers {
		if seen[p.name] {
			continue
		}
		seen[p.name] = true
		c := wc[p.name]
		via := p.via
		if r, ok := rc[p.name]; ok {
			// A host peer may be answered with a loopback address too.
			c.OutPackets += r.OutPackets
			c.OutBytes += r.OutBytes
			c.InPackets += r.InPackets
			c.InBytes += r.InBytes
			c.OverPackets += r.OverPackets
			c.OverBytes += r.OverBytes
			switch {
			case via == viaRelay:
				via = relayVia(r)
			case via == viaWall && (r.OutBytes > 0 || r.InBytes > 0 || r.Handed > 0):
				via = viaWall + " and " + relayVia(r)
			}
		}
		add(p.name, via, c)
	}
	// Peers the wall made for answers no declared peer took.
	var extra []string
	for name := range wc {
		if strings.HasPrefix(name, "dns:") {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		add(name, viaWall, wc[name])
	}
	add(netwall.Established, viaWall, wc[netwall.Established])
	add(netwall.Dropped, viaWall, wc[netwall.Dropped])
	return out, nil
}

// spending is what the session sent out through the wall and the relays.
type spending struct {
	// delivered reached the peers; attempted is what the agent sent,
	// delivered or held past the budget.
	delivered, attempted uint64
}

// exceeded reports whether the session spent its egress budget: the
// wall's quota, or what it and the relays were sent.
func (n *sessionNet) exceeded() (bool, spending, error) {
	if n == nil || n.plan.cfg.MaxEgressBytes == 0 {
		return false, spending{}, nil
	}
	budget := n.plan.cfg.MaxEgressBytes
	ws, err := n.wall.Spent()
	if err != nil {
		return false, spending{}, err
	}
	sp := spending{delivered: ws.Delivered, attempted: ws.Attempted}
	// The relay's share is what the wall left: the two together stay
	// within the budget.
	n.relay.SetBudget(budget-min(ws.Delivered, budget), nil)
	for _, c := range n.relay.Counters() {
		sp.delivered += c.OutBytes
		sp.attempted += c.OutBytes + c.OverBytes
	}
	return ws.Over || sp.attempted >= budget, sp, nil
}

// budgetReason is a strict kill's reason for a spent budget.
func (n *sessionNet) budgetReason(sp spending) string {
	return fmt.Sprintf("the agent exceeded its egress budget: it sent %d bytes (%d delivered) where network.max_egress_bytes allows %d; the packet wall and the loopback relay carry no more",
		sp.attempted, sp.delivered, n.plan.cfg.MaxEgressBytes)
}

// backend is the wall's entry in the verification log.
func (n *sessionNet) backend() vlog.Backend {
	d := []string{
		fmt.Sprintf("own network namespace, joined to the host by veth %s (session address %s, gateway %s%s) and the nftables table %s: a packet to a peer no intent declares is dropped whatever socket call or protocol made it (ICMP, raw sockets)", n.wall.Link, n.wall.Addr, n.wall.HostAddr, n.ipv6Detail(), netwall.TableName(n.id)),
		"the host's loopback and the cloud metadata address are unreachable unless declared; host names reach the addresses the session's DNS proxy answered, for their TTL",
	}
	if ls := n.relay.Listening(); len(ls) > 0 {
		sort.Strings(ls)
		d = append(d, "declared host loopback services relayed into the namespace (copied by klock's process, within the egress budget, whatever is not handed over below): "+strings.Join(ls, ", "))
	}
	n.mu.Lock()
	handing, copyWhy := n.handing, n.copyWhy
	n.mu.Unlock()
	if handing && n.relay.AddfdRefused() {
		copyWhy = "the kernel refused SECCOMP_IOCTL_NOTIF_ADDFD (before Linux 5.9), or klock could not read the agent's calls (CAP_SYS_PTRACE)"
	}
	if copyWhy != "" {
		d = append(d, "loopback relay: connects to the declared host loopback services went on to the copying relay: "+copyWhy)
	}
	if uncounted, open := n.relay.Uncounted(); uncounted+open > 0 {
		d = append(d, fmt.Sprintf("loopback relay: the bytes of %d handed-over connections are not in the counters (%d the kernel could not report, %d still open when this log was written)", uncounted+open, uncounted, open))
	}
	if handing {
		d = append(d, "the agent's TCP connects to those services are handed a socket klock connected in the host's namespace (seccomp user notification, SECCOMP_IOCTL_NOTIF_ADDFD): the kernel carries their bytes, no copy, and counts them (tcp_info, reported by sock_diag when the socket ends; a peer's counters say 'addfd', and a connection's bytes in count the service's FIN as one); any other connect goes on as the agent made it, to the walls")
		if n.relayed != nil {
			d = append(d, "the connects klock answers at the trap never reach cgroup-net's hooks, and this session has no syscall tracepoint (bpf-lsm): the relay reports each to the session's engine itself (source loopback-relay), handed over, failed, or refused at the trap (EISCONN)")
		}
	}
	if b := n.plan.cfg.MaxEgressBytes; b > 0 {
		d = append(d, fmt.Sprintf("egress budget (network.max_egress_bytes): %d bytes; past it the kernel drops the session's packets and a strict session is killed", b))
	}
	if n.plan.raw {
		if n.pingErr != nil {
			d = append(d, "NET:raw: the agent's group could not be let open ping sockets ("+n.pingErr.Error()+"): its pings fail")
		} else {
			d = append(d, fmt.Sprintf("NET:raw: the agent's group (%d) may open ICMP ping sockets in the namespace (net.ipv4.ping_group_range); their echo requests reach the declared peers' addresses (counted under NET:raw), no other ICMP leaves", n.plan.pingGID))
		}
		d = append(d, "NET:raw: a raw (SOCK_RAW) or packet socket still fails with EPERM: the agent runs without CAP_NET_RAW, which no declaration gives it")
	}
	d = append(d, "a service the agent listens on (PROVIDES NET) is reachable from inside its namespace only")
	for _, u := range n.plan.unreachable {
		d = append(d, "unreachable: "+u)
	}
	n.mu.Lock()
	for _, u := range n.notRelayed {
		d = append(d, "not relayed: "+u)
	}
	for _, u := range n.unrouted {
		d = append(d, "unreachable: "+u)
	}
	n.mu.Unlock()
	return vlog.Backend{Name: "netwall", Guarantee: vlog.GuaranteeBlocks, Details: d}
}

// close removes the wall and stops the relays; it may be called again.
func (n *sessionNet) close() {
	if n == nil {
		return
	}
	if n.stop != nil {
		// Before the relay's Close, which waits for its answers: one
		// blocked on a report nobody reads lets go.
		n.stopOnce.Do(func() { close(n.stop) })
	}
	if n.relay != nil {
		_ = n.relay.Close()
	}
	if n.wall != nil {
		if err := n.wall.Close(); err != nil {
			n.log.Warn("remove the session's network wall", "error", err)
		}
	}
}

// sweepWalls removes the walls of sessions no longer running (a klock
// killed before it removed its own), as cgroup.SweepStale does groups.
func sweepWalls(log *slog.Logger) {
	gone, err := netwall.Sweep(cgroup.Alive)
	if len(gone) > 0 {
		log.Info("removed the network walls of sessions that ended without klock", "removed", gone)
	}
	if err != nil {
		log.Debug("sweep stale network walls", "error", err)
	}
}

// budgetPoll is how often a session with an egress budget reads its wall's
// quota: the kernel drops what is over it from the first byte, the kill
// of a strict session follows within this. The loopback relay holds what
// is over its share itself and says so at once.
const budgetPoll = 50 * time.Millisecond

// watchBudget reports on s.overBudget, once, when the agent spent its
// egress budget (network.max_egress_bytes); the returned func stops it.
func (s *running) watchBudget(n *sessionNet) func() {
	s.overBudget = make(chan string, 1)
	if n == nil || n.plan.cfg.MaxEgressBytes == 0 {
		return func() {}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(budgetPoll)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			case <-n.relayOver:
			}
			over, sp, err := n.exceeded()
			if err != nil {
				s.log.Warn("read the egress budget", "error", err)
				continue
			}
			if over {
				s.overBudget <- n.budgetReason(sp)
				return
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

// budgetAtEnd judges the egress budget once more when the agent has
// exited, before the verdict: an agent that sent past its budget and
// exited before the watcher's next poll (or before the relay read what it
// had queued) is killed all the same in strict mode (the kill of a
// session whose agent is gone: the rollback and the log's reason follow),
// and warned about in permissive mode.
func (s *running) budgetAtEnd(n *sessionNet) {
	if n == nil || n.plan.cfg.MaxEgressBytes == 0 || s.budgetSpent {
		return
	}
	n.relay.Settle(time.Second)
	over, sp, err := n.exceeded()
	if err != nil {
		s.log.Warn("read the egress budget", "error", err)
		return
	}
	if over {
		s.overBudgetAt(n.budgetReason(sp))
	}
}

// overBudgetAt acts on a spent budget: a strict session is killed.
func (s *running) overBudgetAt(why string) {
	s.budgetSpent = true
	if s.mode == policy.ModeStrict {
		s.log.Error("killing the session", "reason", why)
		s.kill(why, nil)
	} else {
		s.warn("egress budget spent (permissive): the packet wall drops the agent's packets from now on", "reason", why)
	}
}
