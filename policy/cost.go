package policy

import (
	"fmt"
	"strings"

	"github.com/klocklabs/klock/policy/money"
	"go.yaml.in/yaml/v3"
)

// Money is an integer amount of minor units. In a manifest it is written
// {units: 150, currency: USD} or as an exact decimal string "1.50 USD";
// a float is always rejected.
type Money struct{ money.Amount }

func (m *Money) decodeNode(d *decoder, n *yaml.Node, path string) {
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		a, err := money.Parse(n.Value)
		if err != nil {
			d.fail(n, path, "money", "write {units: <integer minor units>, currency: USD} or \"12.34 USD\"", "%v", err)
			return
		}
		m.Amount = a
	case n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!float" || n.ShortTag() == "!!int"):
		want := "write {units: <integer minor units>, currency: USD} or an exact string such as \"" + n.Value + " USD\""
		if f := path[strings.LastIndex(path, ".")+1:]; f == "max_cost" || f == "expected_cost" {
			want += ", or KCC's " + f + "_usd: " + n.Value // the currency is then in the name
		}
		d.fail(n, path, "money-float", want, "money needs integer minor units and a currency; the bare number %s is not money", n.Value)
	case n.Kind == yaml.MappingNode:
		var raw struct {
			Units    uint64 `yaml:"units"`
			Currency string `yaml:"currency"`
		}
		before := len(d.r.diags)
		d.decodeStruct(n, reflectElem(&raw), path)
		for i := before; i < len(d.r.diags); i++ {
			if d.r.diags[i].Field == join(path, "units") && d.r.diags[i].Code == "type" {
				d.r.diags[i].Code = "money-float"
				d.r.diags[i].Problem = "money units must be an integer count of minor units (cents, satoshis, ...): floats are rejected"
				d.r.diags[i].Want = "write e.g. units: 150 for 1.50 USD"
			}
		}
		if _, err := money.Exponent(raw.Currency); err != nil {
			d.fail(n, join(path, "currency"), "money", "", "%v", err)
			return
		}
		m.Amount = money.Amount{Units: raw.Units, Currency: raw.Currency}
	default:
		d.fail(n, path, "money", "write {units: 150, currency: USD}", "want money, got %s", kindName(n))
	}
}

// MarshalYAML renders {units, currency}.
func (m Money) MarshalYAML() (any, error) { return m.Amount, nil }

// CostEnvelope is KCC surface 5: the budget per invocation of the agent.
type CostEnvelope struct {
	ExpectedTokensIn  int64   `yaml:"expected_tokens_in" json:"expected_tokens_in"`
	MaxTokensIn       int64   `yaml:"max_tokens_in" json:"max_tokens_in"`
	ExpectedTokensOut int64   `yaml:"expected_tokens_out" json:"expected_tokens_out"`
	MaxTokensOut      int64   `yaml:"max_tokens_out" json:"max_tokens_out"`
	ExpectedLatencyMS int64   `yaml:"expected_latency_ms" json:"expected_latency_ms"`
	MaxLatencyMS      int64   `yaml:"max_latency_ms" json:"max_latency_ms"`
	ContextEfficiency float64 `yaml:"context_efficiency" json:"context_efficiency" jsonschema:"minimum=0.3,maximum=1"`
	ExpectedCost      *Money  `yaml:"expected_cost" json:"expected_cost"`
	MaxCost           *Money  `yaml:"max_cost" json:"max_cost"`
	// ParentGrant delegates this agent's grants from another's (seed 003):
	// each is defined under that grant, may only tighten it, and what it
	// charges is charged to the parent too.
	ParentGrant string `yaml:"parent_grant" json:"parent_grant,omitempty" jsonschema:"description=capability#index of the delegating agent's grant in the same budget ledger (e.g. orchestrator-01#0): this agent's grants are its children and may only tighten it"`

	// KCC's spelling: bare decimals of US dollars, read exactly from their
	// text (never as floats). Parse moves them into ExpectedCost and MaxCost.
	ExpectedCostUSD *USDDecimal `yaml:"expected_cost_usd" json:"-"`
	MaxCostUSD      *USDDecimal `yaml:"max_cost_usd" json:"-"`
}

// Grant is a Chio ToolGrant: per-tool budget limits.
type Grant struct {
	Tool                 string   `yaml:"tool" json:"tool"`
	ServerID             string   `yaml:"server_id" json:"server_id,omitempty"`
	Operations           []string `yaml:"operations" json:"operations,omitempty"`
	MaxCostPerInvocation *Money   `yaml:"max_cost_per_invocation" json:"max_cost_per_invocation,omitempty"`
	MaxTotalCost         *Money   `yaml:"max_total_cost" json:"max_total_cost,omitempty"`
	MaxInvocations       uint64   `yaml:"max_invocations" json:"max_invocations,omitempty"`
	// Capabilities are the capability codes the operator grants for the
	// tool (tool.<name>.invoke, finer codes such as tool.energy.meter.read,
	// a category C tool's tool.<name>.sensitive). Set, it is exactly what
	// the run holds for the tool: a code left out is withheld.
	Capabilities []string `yaml:"capabilities" json:"capabilities,omitempty"`
}

func (g Grant) String() string {
	s := g.Tool
	if g.MaxCostPerInvocation != nil {
		s += fmt.Sprintf(" per-call<=%s", g.MaxCostPerInvocation)
	}
	if g.MaxTotalCost != nil {
		s += fmt.Sprintf(" total<=%s", g.MaxTotalCost)
	}
	if g.MaxInvocations > 0 {
		s += fmt.Sprintf(" calls<=%d", g.MaxInvocations)
	}
	return s
}
