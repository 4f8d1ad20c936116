package check

import (
	"fmt"
	"sort"
	"strings"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// Evidence is one stage's verdict on a call and the facts it used, as the
// receipts carry it (seed 003: guard_name, verdict, details). Verdict true:
// the stage let the call on (an escalation too: a human then decides).
// Details name limits, fields and codes, never argument values:
// confidential mode keeps those out of receipts.
type Evidence = receipt.Evidence

// refusal is the evidence of the stage that refused: its reason code and
// the field or limit it names, not the message (which may quote arguments).
func refusal(check string, e *toolerr.Error) Evidence {
	d := string(e.Class)
	if e.Reason != "" {
		d += " (" + e.Reason + ")"
	}
	return Evidence{GuardName: check, Verdict: false, Details: "refused: " + d}
}

// schemaEvidence says what the schema stage checked.
func schemaEvidence(c *contract, paths map[string]pathViews) Evidence {
	if len(c.params) == 0 {
		return Evidence{GuardName: "schema", Verdict: true, Details: "no input_schema declared"}
	}
	d := fmt.Sprintf("arguments held to input_schema (%s)", strings.Join(c.argNames, ", "))
	if len(paths) > 0 {
		names := make([]string, 0, len(paths))
		for n := range paths {
			names = append(names, n)
		}
		sort.Strings(names)
		d += "; paths resolved within their roots: " + strings.Join(names, ", ")
	}
	return Evidence{GuardName: "schema", Verdict: true, Details: d}
}

// rateEvidence names the limits in force for the call.
func rateEvidence(l policy.RateLimits) Evidence {
	var parts []string
	for _, w := range []struct {
		name string
		n    int
	}{{"per_run", l.PerRun}, {"per_minute", l.PerMinute}, {"per_hour", l.PerHour}, {"per_day", l.PerDay}} {
		if w.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", w.name, w.n))
		}
	}
	for _, a := range sortedKeys(l.PerArgument) {
		parts = append(parts, "per value of "+a)
	}
	if len(parts) == 0 {
		return Evidence{GuardName: "rate", Verdict: true, Details: "no rate limit declared"}
	}
	return Evidence{GuardName: "rate", Verdict: true, Details: "within " + strings.Join(parts, ", ")}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// effectEvidence is the side-effect and autonomy stage's: the class, and
// allow or escalate with why.
func effectEvidence(t *policy.Tool, v Verdict, check, why string) Evidence {
	d := string(t.SideEffects) + ": " + v.String()
	if why != "" {
		d += " (" + why + ")"
	}
	return Evidence{GuardName: check, Verdict: v != Deny, Details: d}
}
