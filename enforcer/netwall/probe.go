//go:build linux

package netwall

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ProbeError says which part of the wall the kernel refused, and how to
// get it.
type ProbeError struct {
	Step string // "veth", "nftables", "nft set timeout", "nft masquerade", "nft conntrack", "nft quota"
	Err  error
	Fix  string
}

func (e *ProbeError) Error() string { return fmt.Sprintf("netwall: %s: %v", e.Step, e.Err) }
func (e *ProbeError) Unwrap() error { return e.Err }

// Probe creates and removes, for real, a throwaway veth pair and an
// nftables table with what a session's wall uses (a set with timeouts,
// masquerade, conntrack state, named counters and quota); the error is a
// *ProbeError naming the first part missing.
func Probe() error {
	fix := func(step string, err error, module string) error {
		f := "load the kernel module (modprobe " + module + ") or use a kernel built with it"
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			f = "run as root (CAP_NET_ADMIN in the host's network namespace)"
		}
		return &ProbeError{Step: step, Err: err, Fix: f}
	}
	name := fmt.Sprintf("klprobe%d", os.Getpid()%100000)
	la := netlink.NewLinkAttrs()
	la.Name = name
	v := &netlink.Veth{LinkAttrs: la, PeerName: name + "p"}
	if err := netlink.LinkAdd(v); err != nil && !errors.Is(err, unix.EEXIST) {
		return fix("veth", err, "veth (CONFIG_VETH)")
	}
	defer func() { _ = netlink.LinkDel(v) }()

	table := fmt.Sprintf("klock_probe_%d_%d", os.Getpid(), time.Now().UnixNano())
	steps := []struct {
		step, module string
		add          func(c *nftables.Conn, t *nftables.Table) error
	}{
		{"nftables", "nf_tables (CONFIG_NF_TABLES, CONFIG_NF_TABLES_INET)", func(c *nftables.Conn, t *nftables.Table) error {
			c.AddObj(&nftables.CounterObj{Table: t, Name: "c"})
			return nil
		}},
		{"nft quota", "nft_quota (CONFIG_NFT_QUOTA)", func(c *nftables.Conn, t *nftables.Table) error {
			c.AddObj(&nftables.QuotaObj{Table: t, Name: "q", Bytes: 1 << 20})
			return nil
		}},
		{"nft set timeout", "nf_tables (sets with timeouts: CONFIG_NF_TABLES_SET)", func(c *nftables.Conn, t *nftables.Table) error {
			s := &nftables.Set{Table: t, Name: "s", ID: 1, KeyType: nftables.TypeIPAddr, HasTimeout: true}
			if err := c.AddSet(s, nil); err != nil {
				return err
			}
			return c.SetAddElements(s, []nftables.SetElement{{Key: []byte{192, 0, 2, 1}, Timeout: time.Minute}})
		}},
		{"nft conntrack", "nft_ct (CONFIG_NFT_CT, CONFIG_NF_CONNTRACK)", func(c *nftables.Conn, t *nftables.Table) error {
			accept := nftables.ChainPolicyAccept
			ch := c.AddChain(&nftables.Chain{Table: t, Name: "f", Hooknum: nftables.ChainHookForward, Type: nftables.ChainTypeFilter, Priority: nftables.ChainPriorityFilter, Policy: &accept})
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: cat(metaEq(expr.MetaKeyIIFNAME, []byte(name+"\x00")),
				ctState(expr.CtStateBitESTABLISHED), counterRef("c"), []expr.Any{&expr.Objref{Type: unix.NFT_OBJECT_QUOTA, Name: "q"}}, verdict(expr.VerdictAccept))})
			return nil
		}},
		{"nft masquerade", "nft_masq and nf_nat (CONFIG_NFT_MASQ, CONFIG_NF_NAT)", func(c *nftables.Conn, t *nftables.Table) error {
			accept := nftables.ChainPolicyAccept
			ch := c.AddChain(&nftables.Chain{Table: t, Name: "p", Hooknum: nftables.ChainHookPostrouting, Type: nftables.ChainTypeNAT, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: cat(metaEq(expr.MetaKeyOIFNAME, []byte(name+"\x00")), []expr.Any{&expr.Masq{}})})
			return nil
		}},
	}
	c, err := nftables.New()
	if err != nil {
		return fix("nftables", err, "nf_tables")
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: table}
	c.AddTable(t)
	if err := c.Flush(); err != nil {
		return fix("nftables", err, steps[0].module)
	}
	defer func() { _ = delTable(table) }()
	for _, s := range steps {
		if err := s.add(c, t); err != nil {
			return fix(s.step, err, s.module)
		}
		if err := c.Flush(); err != nil {
			return fix(s.step, err, s.module)
		}
	}
	return nil
}

// ForwardBlockers lists the base chains of other nftables tables on the
// forward hook whose policy is drop ("family table/chain"): they may drop
// what a session's wall accepts (Docker's iptables-nft FORWARD chain is
// one). Rules of legacy iptables are not seen.
func ForwardBlockers() ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	chains, err := c.ListChains()
	if err != nil {
		return nil, err
	}
	var r []string
	for _, ch := range chains {
		if ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookForward || ch.Policy == nil || *ch.Policy != nftables.ChainPolicyDrop {
			continue
		}
		if ch.Table == nil || strings.HasPrefix(ch.Table.Name, tablePrefix) {
			continue
		}
		fam := map[nftables.TableFamily]string{nftables.TableFamilyIPv4: "ip", nftables.TableFamilyINet: "inet", nftables.TableFamilyIPv6: "ip6"}[ch.Table.Family]
		if fam == "" {
			continue // another family does not see IPv4 forwarding
		}
		r = append(r, fam+" "+ch.Table.Name+"/"+ch.Name)
	}
	return r, nil
}
