//go:build linux

package netwall

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/klocklabs/klock/policy"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Errors.
var (
	ErrUnsupported = errors.New("netwall: unsupported")
	ErrNoAddress   = errors.New("netwall: no free session address in " + Range.String())
	ErrUnknownPeer = errors.New("netwall: unknown peer")
	// ErrInUse: a live wall already has the session's short id.
	ErrInUse = errors.New("netwall: in use")
)

// Range is where session addresses come from: one /30 per session.
var Range = netip.MustParsePrefix("10.203.0.0/16")

const (
	linkPrefix  = "kl-"
	tablePrefix = "klock_"
	aliasPrefix = "klock "
	nsLink      = "eth0"
	lockFile    = "/run/klock/netwall.lock"
	// Table-level names.
	chainEgress    = "egress"    // the session's packets, to anywhere
	chainIngress   = "ingress"   // packets to the session
	chainPeersOut  = "peers_out" // one rule per peer (appended by Allow)
	chainPeersIn   = "peers_in"
	counterDropped = "dropped" // packets from the session dropped
	counterDropIn  = "dropped_in"
	counterEstab   = "established" // accepted as an established flow no peer covers now
	counterPingOut = "ping_out"    // ICMP echo requests to a peer's address (Config.PingPeer)
	counterPingIn  = "ping_in"     // their replies
	counterPingOv  = "ping_over"   // ICMP echo requests past the budget, dropped
	quotaBudget    = "budget"
)

// Keys of Counters besides the peers' names.
const (
	Dropped     = "(dropped)"
	Established = "(established)"
)

// Metadata is the cloud metadata address dropped unless declared.
var Metadata = netip.MustParseAddr("169.254.169.254")

// Peer is one declared destination.
type Peer struct {
	// Name identifies the peer in Counters and AllowPeer (e.g. the intent,
	// "NET:api.example.com:443/tcp"); unique in a Config.
	Name string
	// Prefix is the peer's address range; invalid (the zero value) for a
	// peer named by host only, reached through the addresses Allow adds.
	Prefix netip.Prefix
	Ports  policy.PortRange
	Proto  policy.Proto // ProtoAny: tcp and udp
}

// Config is what the wall lets through.
type Config struct {
	Peers []Peer
	// AllowMetadata lets peers cover 169.254.169.254 (the cloud metadata
	// service), dropped otherwise whatever the peers.
	AllowMetadata bool
	// MaxEgressBytes, when not 0, is the session's budget of bytes out:
	// past it the kernel drops its packets and Exceeded says so.
	MaxEgressBytes uint64
	// PingPeer, when set (NET:raw declared), lets the session's ICMP echo
	// requests reach every peer's address (a host-only peer's: its live
	// Allow entries), whatever the peer's ports and protocol, within the
	// budget; their replies come back as for any flow. Counted under this
	// name. No other ICMP type, and no other protocol, goes out.
	PingPeer string
}

// Target names the agent's network namespace: FD when > 0 (an open
// /proc/<pid>/ns/net or similar, still the caller's), else Pid's.
type Target struct {
	Pid int
	FD  int
}

// Counts are a peer's packets and bytes out of and into the session:
// what the wall let through (IP packets, headers included). Over* are the
// session's packets to the peer past the egress budget, which the wall
// dropped (also in Dropped): what was sent is Out + Over, what was
// delivered Out.
type Counts struct {
	OutPackets, OutBytes, InPackets, InBytes uint64
	OverPackets, OverBytes                   uint64
}

// Wall is one session's network wall.
type Wall struct {
	ID       string
	Short    string
	Link     string     // host side, "kl-<short>"
	HostAddr netip.Addr // host side address: the namespace's gateway
	Addr     netip.Addr // the session's address (eth0 in its namespace)
	// HostAddr6 and Addr6 are the same for IPv6 (from Range6); both
	// invalid when the session has no IPv6, and NoIPv6 says why.
	HostAddr6, Addr6 netip.Addr
	NoIPv6           error

	mu      sync.Mutex
	conn    *nftables.Conn
	table   *nftables.Table
	ifindex int
	peers   []*peerState
	nextSet uint32
	budget  uint64
	ping    string // Config.PingPeer
	closed  bool
	// madeLink, madeTable: what Setup made, the only things a failed
	// Setup removes (a link of the same name may be another wall's).
	madeLink, madeTable bool
	// owner is the wall's locked owner file (owner.go), held from Setup
	// to Close: Sweep leaves a wall whose owner lives.
	owner *os.File
}

type peerState struct {
	Peer
	idx  int
	set  *nftables.Set // host-only peers: IPv4 addresses added by Allow
	set6 *nftables.Set // and IPv6 ones
}

// ShortID is the 12 hex digits naming id's link and table.
func ShortID(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:6])
}

// LinkName and TableName name id's veth (host side) and nftables table.
func LinkName(id string) string  { return linkPrefix + ShortID(id) }
func TableName(id string) string { return tablePrefix + ShortID(id) }

var procLock sync.Mutex

// lock serializes address allocation and sweeping, in this process and
// across klock processes.
func lock() (func(), error) {
	procLock.Lock()
	if err := os.MkdirAll("/run/klock", 0o755); err != nil {
		procLock.Unlock()
		return nil, fmt.Errorf("netwall: %w", err)
	}
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		procLock.Unlock()
		return nil, fmt.Errorf("netwall: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		procLock.Unlock()
		return nil, fmt.Errorf("netwall: lock %s: %w", lockFile, err)
	}
	return func() { f.Close(); procLock.Unlock() }, nil
}

func (c *Config) validate() error {
	seen := map[string]bool{}
	for _, p := range c.Peers {
		if p.Name == "" || seen[p.Name] || p.Name == Dropped || p.Name == Established || p.Name == c.PingPeer {
			return fmt.Errorf("netwall: peer name %q empty or repeated", p.Name)
		}
		seen[p.Name] = true
		if p.Proto > policy.ProtoUDP || p.Ports.Lo > p.Ports.Hi {
			return fmt.Errorf("netwall: peer %s: bad ports or protocol", p.Name)
		}
	}
	return nil
}

// Setup builds the wall of session id around the network namespace t (see
// the package doc). On error nothing is left behind.
func Setup(ctx context.Context, id string, t Target, cfg Config) (*Wall, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	fd := t.FD
	if fd <= 0 {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", t.Pid))
		if err != nil {
			return nil, fmt.Errorf("netwall: the agent's network namespace: %w", err)
		}
		defer f.Close()
		fd = int(f.Fd())
	}
	w := &Wall{ID: id, Short: ShortID(id), Link: LinkName(id), budget: cfg.MaxEgressBytes, ping: cfg.PingPeer}
	ok := false
	defer func() {
		if !ok {
			_ = w.teardown()
		}
	}()
	unlock, err := lock()
	if err != nil {
		return nil, err
	}
	// The owner file is made and locked under the lock Sweep holds: Sweep
	// never sees it made and not yet locked.
	if w.owner, err = holdOwner(w.Short); err == nil {
		err = w.link(fd)
	}
	unlock()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := w.namespaceSide(fd); err != nil {
		return nil, err
	}
	if err := w.buildTable(cfg); err != nil {
		return nil, err
	}
	ok = true
	return w, nil
}

// link allocates the address and makes the veth pair (host side up, with
// its address, forwarding on). Called under lock.
func (w *Wall) link(nsfd int) error {
	used, err := usedSlots()
	if err != nil {
		return err
	}
	n := uint32(1) << (32 - Range.Bits() - 2)
	h := sha256.Sum256([]byte(w.ID))
	start := binary.BigEndian.Uint32(h[6:10]) % n
	slot := n
	for i := uint32(0); i < n; i++ {
		if s := (start + i) % n; !used[s] {
			slot = s
			break
		}
	}
	if slot == n {
		return ErrNoAddress
	}
	base := binary.BigEndian.Uint32(Range.Addr().AsSlice()) + 4*slot
	w.HostAddr, w.Addr = u32addr(base+1), u32addr(base+2)

	la := netlink.NewLinkAttrs()
	la.Name = w.Link
	veth := &netlink.Veth{LinkAttrs: la, PeerName: nsLink, PeerNamespace: netlink.NsFd(nsfd)}
	if err := netlink.LinkAdd(veth); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("netwall: link %s exists: session %s has a wall already (or a stale one: Sweep)", w.Link, w.ID)
		}
		return fmt.Errorf("netwall: add veth %s: %w", w.Link, err)
	}
	w.madeLink = true
	l, err := netlink.LinkByName(w.Link)
	if err != nil {
		return fmt.Errorf("netwall: %s: %w", w.Link, err)
	}
	w.ifindex = l.Attrs().Index
	if err := netlink.LinkSetAlias(l, aliasPrefix+w.ID); err != nil {
		return fmt.Errorf("netwall: alias %s: %w", w.Link, err)
	}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet(w.HostAddr, 30)}); err != nil {
		return fmt.Errorf("netwall: address %s: %w", w.Link, err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+w.Link+"/forwarding", []byte("1"), 0); err != nil {
		return fmt.Errorf("netwall: %w", err)
	}
	if err := ensureForwarding(); err != nil {
		return err
	}
	if err := w.hostSide6(l, slot); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("netwall: up %s: %w", w.Link, err)
	}
	return nil
}

// ensureForwarding turns net.ipv4.ip_forward on when off: replies to the
// session come in on the host's uplink, and the kernel forwards only what
// arrives on a link with forwarding on.
func ensureForwarding() error {
	const p = "/proc/sys/net/ipv4/ip_forward"
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("netwall: %w", err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := os.WriteFile(p, []byte("1"), 0); err != nil {
		return fmt.Errorf("netwall: turn on %s: %w", p, err)
	}
	return nil
}

// usedSlots are the /30 slots of Range held by kl-* links.
func usedSlots() (map[uint32]bool, error) {
	links, err := consistent(netlink.LinkList)
	if err != nil {
		return nil, fmt.Errorf("netwall: list links: %w", err)
	}
	used := map[uint32]bool{}
	base := binary.BigEndian.Uint32(Range.Addr().AsSlice())
	for _, l := range links {
		if !strings.HasPrefix(l.Attrs().Name, linkPrefix) {
			continue
		}
		addrs, err := consistent(func() ([]netlink.Addr, error) { return netlink.AddrList(l, unix.AF_INET) })
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP.To4())
			if ok && Range.Contains(ip) {
				used[(binary.BigEndian.Uint32(ip.AsSlice())-base)/4] = true
			}
		}
	}
	return used, nil
}

// namespaceSide configures eth0 and lo in the namespace, and the default
// route through the host side.
func (w *Wall) namespaceSide(nsfd int) error {
	// NETLINK_ROUTE only: a handle for every family fails where one is
	// missing (no xfrm_user module: EPROTONOSUPPORT).
	h, err := netlink.NewHandleAt(netns.NsHandle(nsfd), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netwall: netlink in the session's namespace: %w", err)
	}
	defer h.Delete()
	l, err := h.LinkByName(nsLink)
	if err != nil {
		return fmt.Errorf("netwall: %s in the session's namespace: %w", nsLink, err)
	}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipnet(w.Addr, 30)}); err != nil {
		return fmt.Errorf("netwall: address %s: %w", nsLink, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("netwall: up %s: %w", nsLink, err)
	}
	if lo, err := h.LinkByName("lo"); err == nil {
		_ = h.LinkSetUp(lo)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.IP(w.HostAddr.AsSlice())}); err != nil {
		return fmt.Errorf("netwall: default route: %w", err)
	}
	if err := w.nsSide6(h, l); err != nil {
		return err
	}
	// Until the kernel's link watcher has run for a link just up, it
	// sends through a qdisc that drops everything: the agent's first
	// packets would be lost (a connect waiting a second for its SYN's
	// retransmission). Wait for both ends to be operational.
	if err := waitOperUp(h, nsLink); err != nil {
		return err
	}
	return waitOperUp(nil, w.Link)
}

// waitOperUp polls name's operational state (through h, or the host's
// netlink when nil) until it is up, for at most a second.
func waitOperUp(h *netlink.Handle, name string) error {
	deadline := time.Now().Add(time.Second)
	for {
		var l netlink.Link
		var err error
		if h != nil {
			l, err = h.LinkByName(name)
		} else {
			l, err = netlink.LinkByName(name)
		}
		if err != nil {
			return fmt.Errorf("netwall: %s: %w", name, err)
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netwall: %s is not operational after a second (state %s)", name, l.Attrs().OperState)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (w *Wall) buildTable(cfg Config) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netwall: nftables: %w", err)
	}
	w.conn = c
	w.madeTable = true
	w.table = c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: tablePrefix + w.Short})
	t := w.table
	for _, n := range []string{counterDropped, counterDropIn, counterEstab, counterPingOut, counterPingIn, counterPingOv} {
		c.AddObj(&nftables.CounterObj{Table: t, Name: n})
	}
	if w.budget > 0 {
		c.AddObj(&nftables.QuotaObj{Table: t, Name: quotaBudget, Bytes: w.budget})
	}
	egress := c.AddChain(&nftables.Chain{Table: t, Name: chainEgress})
	ingress := c.AddChain(&nftables.Chain{Table: t, Name: chainIngress})
	c.AddChain(&nftables.Chain{Table: t, Name: chainPeersOut})
	c.AddChain(&nftables.Chain{Table: t, Name: chainPeersIn})
	accept := nftables.ChainPolicyAccept
	base := func(name string, hook *nftables.ChainHook, typ nftables.ChainType, prio *nftables.ChainPriority) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Table: t, Name: name, Hooknum: hook, Type: typ, Priority: prio, Policy: &accept})
	}
	iif := uint32(w.ifindex)
	fwd := base("forward", nftables.ChainHookForward, nftables.ChainTypeFilter, nftables.ChainPriorityFilter)
	c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: cat(metaEq(expr.MetaKeyIIF, u32(iif)), jump(chainEgress))})
	c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: cat(metaEq(expr.MetaKeyOIF, u32(iif)), jump(chainIngress))})
	in := base("input", nftables.ChainHookInput, nftables.ChainTypeFilter, nftables.ChainPriorityFilter)
	out := base("output", nftables.ChainHookOutput, nftables.ChainTypeFilter, nftables.ChainPriorityFilter)
	v6 := w.Addr6.IsValid()
	if v6 {
		// Neighbor discovery with the host side, and the host's errors,
		// before the walls: IPv6 cannot reach its gateway without them.
		w.linkControl6(in, expr.MetaKeyIIF, linkControlOut)
		w.linkControl6(out, expr.MetaKeyOIF, linkControlIn)
		w.linkControl6(out, expr.MetaKeyOIF, hostErrors)
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: cat(metaEq(expr.MetaKeyIIF, u32(iif)), jump(chainEgress))})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: cat(metaEq(expr.MetaKeyOIF, u32(iif)), jump(chainIngress))})
	post := base("postrouting", nftables.ChainHookPostrouting, nftables.ChainTypeNAT, nftables.ChainPriorityNATSource)
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: cat(ipv4(), ipField(12, netip.PrefixFrom(w.Addr, 32)),
		[]expr.Any{&expr.Meta{Key: expr.MetaKeyOIF, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: u32(iif)}},
		[]expr.Any{&expr.Masq{}})})
	if v6 {
		w.masq6(post)
	}

	// egress: other protocols, forged sources, loopback and metadata
	// first, then the peers, then established flows, then drop.
	drop := func(e []expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: egress, Exprs: cat(e, counterRef(counterDropped), verdict(expr.VerdictDrop))})
	}
	notProto := func(p byte) []expr.Any {
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{p}}}
	}
	if v6 {
		drop(cat(notProto(unix.NFPROTO_IPV4), notProto(unix.NFPROTO_IPV6)))
		w.egress6(drop, cfg.AllowMetadata)
	} else {
		drop(notProto(unix.NFPROTO_IPV4)) // IPv6 too: the session has none
	}
	// A source other than the session's address (a raw socket's forgery)
	// would leave without masquerade.
	drop(cat(ipv4(), ipField(12, netip.PrefixFrom(w.Addr, 32))[:1], []expr.Any{&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: w.Addr.AsSlice()}}))
	drop(cat(ipv4(), ipField(16, netip.MustParsePrefix("127.0.0.0/8"))))
	if !cfg.AllowMetadata {
		drop(cat(ipv4(), ipField(16, netip.PrefixFrom(Metadata, 32))))
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: egress, Exprs: jump(chainPeersOut)})
	c.AddRule(&nftables.Rule{Table: t, Chain: egress, Exprs: cat(ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), w.quota(), counterRef(counterEstab), verdict(expr.VerdictAccept))})
	drop(nil)

	if w.ping != "" {
		// Echo replies (the requests' flows are the session's), counted
		// apart: NET:raw's traffic.
		for _, f := range w.families() {
			c.AddRule(&nftables.Rule{Table: t, Chain: &nftables.Chain{Table: t, Name: chainPeersIn}, Exprs: cat(f.proto(), l4(f.icmp), icmpType(f.echoReply),
				ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), counterRef(counterPingIn), verdict(expr.VerdictAccept))})
		}
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: ingress, Exprs: jump(chainPeersIn)})
	c.AddRule(&nftables.Rule{Table: t, Chain: ingress, Exprs: cat(ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))})
	c.AddRule(&nftables.Rule{Table: t, Chain: ingress, Exprs: cat(counterRef(counterDropIn), verdict(expr.VerdictDrop))})

	for _, p := range cfg.Peers {
		if err := w.addPeer(p); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netwall: nftables table %s: %w", t.Name, err)
	}
	return nil
}

// addPeer queues a peer's counters, set and rules (the caller flushes).
func (w *Wall) addPeer(p Peer) error {
	c, t := w.conn, w.table
	ps := &peerState{Peer: p, idx: len(w.peers)}
	o, i := ps.counters()
	c.AddObj(&nftables.CounterObj{Table: t, Name: o})
	c.AddObj(&nftables.CounterObj{Table: t, Name: i})
	if w.budget > 0 {
		c.AddObj(&nftables.CounterObj{Table: t, Name: ps.over()})
	}
	for _, f := range w.families() {
		dst, src, err := w.peerAddrs(ps, f)
		if err != nil {
			return err
		}
		if dst != nil { // nil: a prefix of the other family
			w.peerRules(ps, f, dst, src)
		}
	}
	w.peers = append(w.peers, ps)
	return nil
}

// peerAddrs are the expressions matching ps's addresses of family f as
// destination and as source (nil when ps's prefix is of the other
// family); a host-only peer gets a set of f's addresses for Allow.
func (w *Wall) peerAddrs(ps *peerState, f family) (dst, src []expr.Any, err error) {
	if p := ps.Prefix; p.IsValid() {
		// An IPv4-mapped prefix is its IPv4 prefix.
		pf := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-(p.Addr().BitLen()-32)*boolInt(p.Addr().Is4In6())).Masked()
		if pf.Addr().Is6() != f.v6 {
			return nil, nil, nil
		}
		return f.field(true, pf), f.field(false, pf), nil
	}
	w.nextSet++
	set := &nftables.Set{Table: w.table, Name: fmt.Sprintf("allow%d", ps.idx), ID: w.nextSet, KeyType: nftables.TypeIPAddr, HasTimeout: true}
	if f.v6 {
		set.Name, set.KeyType = fmt.Sprintf("allow6_%d", ps.idx), nftables.TypeIP6Addr
		ps.set6 = set
	} else {
		ps.set = set
	}
	if err := w.conn.AddSet(set, nil); err != nil {
		return nil, nil, fmt.Errorf("netwall: set for %s: %w", ps.Name, err)
	}
	lookup := func(off uint32) []expr.Any {
		return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: f.addrLen()},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID}}
	}
	return lookup(f.offset(true)), lookup(f.offset(false)), nil
}

// peerRules queues ps's rules for family f: its flows out (within the
// budget, then counted apart and dropped past it), their replies in, and
// with PingPeer the echo requests to its addresses.
func (w *Wall) peerRules(ps *peerState, f family, dst, src []expr.Any) {
	c, t := w.conn, w.table
	o, i := ps.counters()
	out := &nftables.Chain{Table: t, Name: chainPeersOut}
	in := &nftables.Chain{Table: t, Name: chainPeersIn}
	for _, proto := range protos(ps.Proto) {
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: cat(f.proto(), dst, l4(proto), ports(2, ps.Ports), w.quota(), counterRef(o), verdict(expr.VerdictAccept))})
		if w.budget > 0 {
			// Past the budget the quota no longer matches: the packet
			// is the peer's all the same, counted as sent and not
			// delivered, and dropped.
			c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: cat(f.proto(), dst, l4(proto), ports(2, ps.Ports), counterRef(ps.over()), counterRef(counterDropped), verdict(expr.VerdictDrop))})
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: cat(f.proto(), src, l4(proto), ports(0, ps.Ports), ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), counterRef(i), verdict(expr.VerdictAccept))})
	}
	if w.ping != "" {
		// NET:raw: an ICMP echo request to the peer's address, whatever
		// its ports (the only ICMP a ping socket sends).
		echo := cat(f.proto(), dst, l4(f.icmp), icmpType(f.echo))
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: cat(echo, w.quota(), counterRef(counterPingOut), verdict(expr.VerdictAccept))})
		if w.budget > 0 {
			c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: cat(echo, counterRef(counterPingOv), counterRef(counterDropped), verdict(expr.VerdictDrop))})
		}
	}
}

// family is what the rules of one IP version differ in.
type family struct {
	v6              bool
	icmp            byte // the ICMP protocol's number
	echo, echoReply byte // its echo request and reply types
}

var (
	fam4 = family{icmp: unix.IPPROTO_ICMP, echo: 8, echoReply: 0}
	fam6 = family{v6: true, icmp: unix.IPPROTO_ICMPV6, echo: 128, echoReply: 129}
)

// families are the IP versions the session has.
func (w *Wall) families() []family {
	if w.Addr6.IsValid() {
		return []family{fam4, fam6}
	}
	return []family{fam4}
}

func (f family) proto() []expr.Any {
	if f.v6 {
		return ipv6()
	}
	return ipv4()
}

func (f family) addrLen() uint32 { return uint32(4 + 12*boolInt(f.v6)) }

// offset is where the destination (or the source) address is in f's
// header.
func (f family) offset(dst bool) uint32 {
	switch {
	case f.v6 && dst:
		return 24
	case f.v6:
		return 8
	case dst:
		return 16
	}
	return 12
}

func (f family) field(dst bool, p netip.Prefix) []expr.Any {
	if f.v6 {
		return ip6Field(f.offset(dst), p)
	}
	return ipField(f.offset(dst), p)
}

func (ps *peerState) counters() (out, in string) {
	return fmt.Sprintf("out%d", ps.idx), fmt.Sprintf("in%d", ps.idx)
}

// over names the counter of the peer's packets past the budget.
func (ps *peerState) over() string { return fmt.Sprintf("over%d", ps.idx) }

// AllowPeer lets the session reach addr on the ports of the host-only peer
// named peer for ttl (0: until Close): the DNS proxy's answer for a
// declared host. Adding an address again renews its timeout.
func (w *Wall) AllowPeer(peer string, addr netip.Addr, ttl time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ps := range w.peers {
		if ps.Name == peer && (ps.set != nil || ps.set6 != nil) {
			return w.allow(ps, addr, ttl)
		}
	}
	return fmt.Errorf("%w: %q (a peer named by host only)", ErrUnknownPeer, peer)
}

// Allow lets the session reach addr on ports/proto for ttl (0: until
// Close), counted under the first host-only peer with these ports and
// protocol, or under a peer "dns:<ports>/<proto>" made for them.
func (w *Wall) Allow(addr netip.Addr, ports policy.PortRange, proto policy.Proto, ttl time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("netwall: closed")
	}
	for _, ps := range w.peers {
		if (ps.set != nil || ps.set6 != nil) && ps.Ports == ports && ps.Proto == proto {
			return w.allow(ps, addr, ttl)
		}
	}
	if err := w.addPeer(Peer{Name: fmt.Sprintf("dns:%s/%s", ports, proto), Ports: ports, Proto: proto}); err != nil {
		return err
	}
	if err := w.conn.Flush(); err != nil {
		w.peers = w.peers[:len(w.peers)-1]
		return fmt.Errorf("netwall: add peer: %w", err)
	}
	return w.allow(w.peers[len(w.peers)-1], addr, ttl)
}

func (w *Wall) allow(ps *peerState, addr netip.Addr, ttl time.Duration) error {
	if w.closed {
		return errors.New("netwall: closed")
	}
	addr = addr.Unmap()
	set := ps.set
	if !addr.Is4() {
		if set = ps.set6; set == nil {
			return fmt.Errorf("%w: IPv6 address %s: %v", ErrUnsupported, addr, w.NoIPv6)
		}
	}
	if ttl > 0 && ttl < time.Millisecond {
		ttl = time.Millisecond
	}
	el := []nftables.SetElement{{Key: addr.AsSlice(), Timeout: ttl}}
	// An add of an existing element keeps its old expiry: delete and add
	// in one batch (atomic: no instant without the element), or, when the
	// element is not there (the batch fails whole), add it alone.
	if err := w.conn.SetDeleteElements(set, []nftables.SetElement{{Key: addr.AsSlice()}}); err != nil {
		return fmt.Errorf("netwall: allow %s: %w", addr, err)
	}
	if err := w.conn.SetAddElements(set, el); err != nil {
		return fmt.Errorf("netwall: allow %s: %w", addr, err)
	}
	if err := w.conn.Flush(); err == nil {
		return nil
	} else if !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netwall: allow %s: %w", addr, err)
	}
	if err := w.conn.SetAddElements(set, el); err != nil {
		return fmt.Errorf("netwall: allow %s: %w", addr, err)
	}
	if err := w.conn.Flush(); err != nil {
		return fmt.Errorf("netwall: allow %s: %w", addr, err)
	}
	return nil
}

// Counters reads every peer's counts, by peer name; Dropped holds what was
// dropped (OutPackets/OutBytes: from the session, In*: to it) and
// Established what flows accepted by a peer carried out once the peer's
// Allow entry expired.
func (w *Wall) Counters() (map[string]Counts, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	objs, err := w.conn.GetNamedObjects(w.table)
	if err != nil {
		return nil, fmt.Errorf("netwall: read counters: %w", err)
	}
	byName := map[string]*expr.Counter{}
	for _, o := range objs {
		if no, ok := o.(*nftables.NamedObj); ok {
			if co, ok := no.Obj.(*expr.Counter); ok {
				byName[no.Name] = co
			}
		}
	}
	get := func(n string) (uint64, uint64) {
		if co := byName[n]; co != nil {
			return co.Packets, co.Bytes
		}
		return 0, 0
	}
	res := map[string]Counts{}
	for _, ps := range w.peers {
		o, i := ps.counters()
		var c Counts
		c.OutPackets, c.OutBytes = get(o)
		c.InPackets, c.InBytes = get(i)
		c.OverPackets, c.OverBytes = get(ps.over())
		res[ps.Name] = c
	}
	if w.ping != "" {
		var p Counts
		p.OutPackets, p.OutBytes = get(counterPingOut)
		p.InPackets, p.InBytes = get(counterPingIn)
		p.OverPackets, p.OverBytes = get(counterPingOv)
		res[w.ping] = p
	}
	var d Counts
	d.OutPackets, d.OutBytes = get(counterDropped)
	d.InPackets, d.InBytes = get(counterDropIn)
	res[Dropped] = d
	var e Counts
	e.OutPackets, e.OutBytes = get(counterEstab)
	res[Established] = e
	return res, nil
}

// Exceeded reports whether the session spent its MaxEgressBytes budget
// (the kernel drops its packets from then on), and how many bytes it got
// out through the wall (every peer's and established flows' out bytes).
// Always false without a budget. The kernel reports the budget's use
// capped at the budget, so a session that sent exactly MaxEgressBytes
// counts as exceeded.
func (w *Wall) Exceeded() (bool, uint64, error) {
	sp, err := w.Spent()
	return sp.Over, sp.Delivered, err
}

// Spending is what the session sent through the wall.
type Spending struct {
	// Delivered: the bytes the wall let out (every peer's, the pings' and
	// established flows' out bytes).
	Delivered uint64
	// Attempted: the bytes the session sent to its peers, delivered or
	// dropped past the budget (the peers' Over counters: the kernel
	// reports the budget's use capped at the budget).
	Attempted uint64
	// Over: the session spent its budget (Attempted reached it).
	Over bool
}

// Spent reads the wall's counters and its budget's use.
func (w *Wall) Spent() (Spending, error) {
	var sp Spending
	c, err := w.Counters()
	if err != nil {
		return sp, err
	}
	for name, n := range c {
		if name != Dropped {
			sp.Delivered += n.OutBytes
			sp.Attempted += n.OutBytes + n.OverBytes
		}
	}
	if w.budget == 0 {
		return sp, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	o, err := w.conn.GetObject(&nftables.NamedObj{Table: w.table, Name: quotaBudget, Type: nftables.ObjTypeQuota})
	if err != nil {
		return sp, fmt.Errorf("netwall: read budget: %w", err)
	}
	no, ok := o.(*nftables.NamedObj)
	q, ok2 := no.Obj.(*expr.Quota)
	if !ok || !ok2 {
		return sp, fmt.Errorf("netwall: budget is a %T", o)
	}
	sp.Over = q.Consumed >= w.budget
	return sp, nil
}

// Close removes the table and the veth pair. It may be called again.
func (w *Wall) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.teardown()
}

// teardown removes the table and the link at once: each waits for the
// kernel's RCU grace periods (about 15 ms each), not for the other.
func (w *Wall) teardown() error {
	errc := make(chan error, 1)
	go func() {
		if !w.madeTable {
			errc <- nil
			return
		}
		errc <- delTable(tablePrefix + w.Short)
	}()
	var err error
	if w.madeLink {
		err = delLink(w.Link)
	}
	err = errors.Join(<-errc, err)
	releaseOwner(w.owner) // the wall is gone: nothing left to sweep or to keep
	w.owner = nil
	return err
}

func delTable(name string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netwall: nftables: %w", err)
	}
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netwall: remove table %s: %w", name, err)
	}
	return nil
}

func delLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("netwall: %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("netwall: remove %s: %w", name, err)
	}
	return nil
}

// Sweep removes the walls of sessions no longer alive: kl-* links whose
// owner process is gone (owner.go) and whose alias names a session alive
// reports dead (a link without a klock alias is left alone), and klock_*
// tables whose link is gone or removed and whose owner is gone. It
// returns what it removed. Call it before a session's Setup, as
// cgroup.SweepStale.
func Sweep(alive func(id string) bool) ([]string, error) {
	unlock, err := lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	links, err := consistent(netlink.LinkList)
	if err != nil {
		return nil, fmt.Errorf("netwall: list links: %w", err)
	}
	var removed []string
	var errs []error
	live := map[string]bool{} // short ids with a live session's link
	for _, l := range links {
		name := l.Attrs().Name
		short, ok := strings.CutPrefix(name, linkPrefix)
		if !ok {
			continue
		}
		id, ok := strings.CutPrefix(l.Attrs().Alias, aliasPrefix)
		if !ok || ShortID(id) != short || ownerHeld(short) || alive(id) {
			live[short] = true
			continue
		}
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("netwall: remove %s: %w", name, err))
			live[short] = true
			continue
		}
		removed = append(removed, name)
	}
	c, err := nftables.New()
	if err != nil {
		return removed, fmt.Errorf("netwall: nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return removed, fmt.Errorf("netwall: list tables: %w", err)
	}
	for _, t := range tables {
		short, ok := strings.CutPrefix(t.Name, tablePrefix)
		if !ok || live[short] || len(short) != 12 || ownerHeld(short) {
			continue
		}
		if err := delTable(t.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, t.Name)
	}
	sweepOwners()
	return removed, errors.Join(errs...)
}

// --- nftables expressions ---

func cat(parts ...[]expr.Any) []expr.Any {
	var r []expr.Any
	for _, p := range parts {
		r = append(r, p...)
	}
	return r
}

func u32(v uint32) []byte {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, v)
	return b
}

func metaEq(k expr.MetaKey, v []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: k, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: v}}
}

func ipv4() []expr.Any { return metaEq(expr.MetaKeyNFPROTO, []byte{unix.NFPROTO_IPV4}) }

// ipField matches the IPv4 address at offset (12: source, 16:
// destination) against p.
func ipField(offset uint32, p netip.Prefix) []expr.Any {
	e := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4}}
	if p.Bits() < 32 {
		m := net.CIDRMask(p.Bits(), 32)
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: m, Xor: make([]byte, 4)})
	}
	return append(e, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()})
}

func l4(proto byte) []expr.Any { return metaEq(expr.MetaKeyL4PROTO, []byte{proto}) }

// icmpType matches the ICMP message type (8: echo request, 0: echo reply).
func icmpType(t byte) []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{t}}}
}

func ports(offset uint32, r policy.PortRange) []expr.Any {
	if r == policy.AllPorts {
		return nil
	}
	e := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: offset, Len: 2}}
	lo, hi := binary.BigEndian.AppendUint16(nil, r.Lo), binary.BigEndian.AppendUint16(nil, r.Hi)
	if r.Lo == r.Hi {
		return append(e, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: lo})
	}
	return append(e, &expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: lo, ToData: hi})
}

func protos(p policy.Proto) []byte {
	switch p {
	case policy.ProtoTCP:
		return []byte{unix.IPPROTO_TCP}
	case policy.ProtoUDP:
		return []byte{unix.IPPROTO_UDP}
	}
	return []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP}
}

func ctState(bits uint32) []expr.Any {
	return []expr.Any{&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: u32(bits), Xor: u32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: u32(0)}}
}

func counterRef(name string) []expr.Any {
	return []expr.Any{&expr.Objref{Type: unix.NFT_OBJECT_COUNTER, Name: name}}
}

func (w *Wall) quota() []expr.Any {
	if w.budget == 0 {
		return nil
	}
	return []expr.Any{&expr.Objref{Type: unix.NFT_OBJECT_QUOTA, Name: quotaBudget}}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func jump(chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}
}

func u32addr(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, 32)}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// consistent retries a netlink dump the kernel interrupted because a link
// or an address changed meanwhile (NLM_F_DUMP_INTR: "results may be
// incomplete or inconsistent"), as they do on a host where sessions are
// made and ended side by side; a few tries see a quiet moment.
func consistent[T any](dump func() (T, error)) (T, error) {
	v, err := dump()
	for i := 1; i < 10 && errors.Is(err, netlink.ErrDumpInterrupted); i++ {
		v, err = dump()
	}
	return v, err
}
