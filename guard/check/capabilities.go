package check

import (
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// heldCapabilities is what the run holds when no WithCapabilities option
// replaced it: every declared tool's capability code, except where the
// operator's grants say otherwise. A grant that lists capabilities is
// exactly what the run holds for its tool (a code it leaves out is
// withheld), and it is the only source of a category C tool's extra
// capability (seed 004 §3.3), which is never held by default.
func heldCapabilities(m *policy.Manifest) map[string]bool {
	held := map[string]bool{}
	listed := map[string]bool{}
	for _, g := range m.Grants {
		if g.Capabilities == nil {
			continue
		}
		listed[g.Tool] = true
		for _, c := range g.Capabilities {
			held[c] = true
		}
	}
	for i := range m.DeclaredTools {
		t := &m.DeclaredTools[i]
		if !listed[t.Name] {
			held[t.CapabilityCode()] = true
		}
	}
	return held
}

// missingCapability returns the capability t needs and the run lacks ("" when
// it holds them all): its own code, and for category C the extra one.
func (p *Pipeline) missingCapability(t *policy.Tool) string {
	if !p.capabilities[t.CapabilityCode()] || p.invokeDenied[t.Name] {
		return t.CapabilityCode()
	}
	if t.Category == "C" && !p.capabilities[t.SensitiveCapability()] {
		return t.SensitiveCapability()
	}
	return ""
}

func capabilityError(t *policy.Tool, code string) *toolerr.Error {
	if code == t.SensitiveCapability() {
		return toolerr.New(toolerr.CapabilityMissing, "capability",
			"%s is category C (sensitive) and the run does not hold its extra capability %s: an operator grants it in the manifest (grants: [{tool: %s, capabilities: [%s, %s]}])",
			t.Name, code, t.Name, t.CapabilityCode(), code)
	}
	return toolerr.New(toolerr.CapabilityMissing, "capability",
		"the run does not hold capability %s (the manifest's grants withhold it)", code)
}
