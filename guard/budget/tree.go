package budget

import (
	"fmt"
	"slices"
	"strings"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

// Delegations rebuilds the delegation tree from receipt chains (klock
// report): each grant with what its own receipts charged (ledger_debit -
// ledger_credit) and its children, read from the receipts' parent_grant.
// A parent's ledger total is its own spend plus its descendants', which
// Total adds up.
type Delegations struct {
	nodes map[Key]*Node
}

// Node is one grant of the tree.
type Node struct {
	Key         Key     `json:"grant"`
	Tool        string  `json:"tool,omitempty"`
	Currency    string  `json:"currency,omitempty"`
	Parent      *Key    `json:"-"`
	Invocations int64   `json:"invocations"`
	Own         int64   `json:"own_units"` // charged by this grant's own calls
	Children    []*Node `json:"children,omitempty"`
}

// Add counts one receipt (those that move no money add nothing but the
// grant's place in the tree).
func (d *Delegations) Add(r *receipt.Receipt) error {
	f := r.Metadata.Financial
	if f == nil {
		return nil
	}
	if d.nodes == nil {
		d.nodes = map[Key]*Node{}
	}
	n := d.node(Key{Capability: r.CapabilityID, Grant: f.GrantIndex})
	n.Currency = f.Currency
	n.Invocations += int64(f.InvocationDelta)
	n.Own += int64(f.LedgerDebit) - int64(f.LedgerCredit)
	if n.Tool == "" {
		n.Tool = r.ToolName
	}
	if f.ParentGrant != "" && n.Parent == nil {
		p, err := ParseKey(f.ParentGrant)
		if err != nil {
			return fmt.Errorf("receipt %d: parent_grant: %w", r.Seq, err)
		}
		n.Parent = &p
		d.node(p)
	}
	return nil
}

func (d *Delegations) node(k Key) *Node {
	n := d.nodes[k]
	if n == nil {
		n = &Node{Key: k}
		d.nodes[k] = n
	}
	return n
}

// Trees returns the grants that delegated or were delegated, roots first,
// each with its children (sorted by key); grants with neither are left out.
func (d *Delegations) Trees() []*Node {
	byKey := func(a, b *Node) int { return strings.Compare(a.Key.String(), b.Key.String()) }
	var roots []*Node
	for _, n := range d.nodes {
		n.Children = nil
	}
	for _, n := range d.nodes {
		if n.Parent == nil {
			continue
		}
		p := d.nodes[*n.Parent]
		p.Children = append(p.Children, n)
		if p.Currency == "" {
			p.Currency = n.Currency // a child is in its parent's currency
		}
	}
	for _, n := range d.nodes {
		slices.SortFunc(n.Children, byKey)
		if n.Parent == nil && len(n.Children) > 0 {
			roots = append(roots, n)
		}
	}
	slices.SortFunc(roots, byKey)
	return roots
}

// Total is what n's ledger total holds: its own spend and its
// descendants'.
func (n *Node) Total() int64 {
	t := n.Own
	for _, c := range n.Children {
		t += c.Total()
	}
	return t
}

// Amount renders units of n's currency.
func (n *Node) Amount(units int64) string {
	if units < 0 || n.Currency == "" {
		return fmt.Sprintf("%d units", units)
	}
	return money.Amount{Units: uint64(units), Currency: n.Currency}.String()
}
