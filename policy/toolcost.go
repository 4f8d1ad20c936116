package policy

import (
	"github.com/klocklabs/klock/policy/money"
	"go.yaml.in/yaml/v3"
)

// decodeNode reads KCC's cost_per_invocation ("tokens|usd") in every form a
// manifest can write it:
//
//	cost_per_invocation: 0.01          # a decimal: US dollars, exactly
//	cost_per_invocation: "0.01 EUR"    # an amount with its currency
//	cost_per_invocation: {tokens: 1200}
//	cost_per_invocation: {money: {units: 1, currency: USD}}
//
// A bare whole number is refused: KCC allows tokens or dollars there, and
// 100 could be either; guessing would mis-state the cost by orders of
// magnitude.
func (c *ToolCost) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind == yaml.MappingNode {
		d.decodeStruct(n, reflectElem(c), path)
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		if a, err := money.Parse(n.Value); err == nil {
			c.Money = &Money{a}
			return
		}
	}
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!str" && digitsOnly(n.Value)) {
		d.fail(n, path, "ambiguous-cost", "write {tokens: "+n.Value+"} for tokens, or "+n.Value+".00 (US dollars) or \""+n.Value+" USD\" for money",
			"cost_per_invocation %s is tokens or dollars (KCC allows both); a whole number does not say which", n.Value)
		return
	}
	units, err := DecimalUnits(n, "USD")
	if err != nil {
		d.failDecimal(n, path, err)
		return
	}
	c.Money = &Money{money.Amount{Units: units, Currency: "USD"}}
}

func digitsOnly(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
