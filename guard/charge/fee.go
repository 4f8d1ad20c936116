package charge

import (
	"encoding/json"
	"fmt"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/money"
)

// A tool's declared cost_per_invocation (KCC surface 4) in money is a fee
// each call of it costs, known before it runs: it is charged on top of
// what the tool reports (metered), so a call costs fee + reported. The
// pre-charge holds at least the fee (the grant's max_cost_per_invocation
// when that is higher, since the metered part is unknown until then); a
// fee above that limit is refused by the ledger like any other cost. The
// receipt's cost_breakdown itemizes the fee (FeeItem) beside the
// reported cost, and its evidence (EvidenceFee) says it was added. A fee
// in tokens is not money and is not charged.

// FeeItem is the cost_breakdown key of the declared fee; MeteredItem holds
// the reported cost when the tool itemized nothing itself.
const (
	FeeItem     = "cost_per_invocation"
	MeteredItem = "metered"
)

// EvidenceFee is the guard_name of a receipt's evidence of the fee.
const EvidenceFee = "cost-per-invocation"

// fees reads the declared money fees by tool.
func fees(m *policy.Manifest) map[string]money.Amount {
	out := map[string]money.Amount{}
	for _, t := range m.DeclaredTools {
		if c := t.CostPerInvocation; c != nil && c.Money != nil && c.Money.Units > 0 {
			out[t.Name] = c.Money.Amount
		}
	}
	return out
}

// reserveFee is the pre-charge of a call whose tool declares fee under
// grant g: the fee, or the grant's per-call maximum when it is higher (a
// zero Amount lets the ledger use that maximum).
func reserveFee(g budget.Grant, fee money.Amount) money.Amount {
	p := g.Limits.PerInvocation
	if p == nil || fee.Currency == g.Limits.Currency && fee.Units > *p {
		return fee
	}
	return money.Amount{}
}

// withFee adds the fee to a reported usage u: the total to charge and the
// breakdown that itemizes it. ok is false when the two cannot be added (a
// reported cost in another currency, a breakdown that is not an object);
// the reservation then stands, with why.
func withFee(u check.Usage, fee money.Amount) (total money.Amount, breakdown []byte, why string, ok bool) {
	reported, err := money.New(u.CostUnits, u.Currency)
	if err != nil {
		return money.Amount{}, nil, err.Error(), false
	}
	if total, err = reported.Add(fee); err != nil {
		return money.Amount{}, nil, fmt.Sprintf("the reported %s and the declared cost_per_invocation %s cannot be added (%v)", reported, fee, err), false
	}
	items := map[string]json.RawMessage{}
	if len(u.Breakdown) > 0 {
		if json.Unmarshal(u.Breakdown, &items) != nil || items == nil {
			return money.Amount{}, nil, "the reported breakdown is not an object the declared cost_per_invocation can be itemized in", false
		}
		if _, clash := items[FeeItem]; clash {
			return money.Amount{}, nil, "the reported breakdown already has an item " + FeeItem, false
		}
	} else {
		items[MeteredItem], _ = json.Marshal(reported.String())
	}
	items[FeeItem], _ = json.Marshal(fee.String())
	breakdown, err = json.Marshal(items)
	if err != nil {
		return money.Amount{}, nil, err.Error(), false
	}
	return total, breakdown, "", true
}

// feeEvidence says what the declared fee added to the settled cost.
func feeEvidence(fee money.Amount, added bool, reported string) receipt.Evidence {
	e := receipt.Evidence{GuardName: EvidenceFee, Verdict: added}
	if added {
		e.Details = fmt.Sprintf("cost_per_invocation %s charged on top of the reported %s", fee, reported)
	} else {
		e.Details = fmt.Sprintf("cost_per_invocation %s is within the reservation that stands", fee)
	}
	return e
}
