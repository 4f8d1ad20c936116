package policy

import (
	"fmt"
	"strings"
)

// kernelViews are the trees whose files are kernel interfaces, not
// content: no lease covers them (enforcer/lease).
var kernelViews = []string{"/dev", "/proc", "/sys"}

// validateTouches checks a tool's touches: the intents its calls are
// leased for. They name what the call changes or reads on this host: a
// FILE or a NET endpoint (running a program is not owning it: a PROC
// intent leases nothing), with the predicates intents allow there.
func validateTouches(m *Manifest, t *Tool, f string, r *report) {
	seen := map[string]int{}
	for i, in := range t.Touches {
		fi := fmt.Sprintf("%s[%d]", f, i)
		if in.Subject != "" && in.Subject != m.Agent.ID {
			r.errorf("subject", fi+".subject", "drop subject or write "+m.Agent.ID, "subject %q is not this manifest's agent %q", in.Subject, m.Agent.ID)
		}
		switch in.Object.Type {
		case ObjProc:
			r.errorf("touches", fi, "name the FILE the tool changes (MUTATES FILE:...) or the endpoint it reaches (CONSUMES NET:...)",
				"%s: a tool call's leases are on files and endpoints; running a program is not owning it, and nothing leases a PROC", in)
			continue
		case ObjNet:
			if in.Predicate != Consumes && in.Predicate != Provides {
				r.errorf("predicate", fi, "use CONSUMES (connect, send) or PROVIDES (bind, listen) for NET", "%s has no meaning on a network object", in.Predicate)
			}
		case ObjFile:
			p := in.Object.Path.Path
			if strings.HasPrefix(p, WorkdirVar) {
				r.errorf("workdir", fi, "set workdir: /absolute/dir, or write an absolute path", "%s uses ${workdir} but the manifest has no workdir", in.raw)
				continue
			}
			for _, k := range kernelViews {
				if p == k || strings.HasPrefix(p, k+"/") {
					r.warnf("not-leased", fi, "drop it: "+k+" holds kernel interfaces, not content anyone holds", "%s is never leased", in)
				}
			}
			if t.SideEffects == SideEffectRead && Changing.Has(in.Predicate) {
				r.errorf("touches", fi, "declare CONSUMES, or classify the tool by the change it makes (REVERSIBLE-WRITE, IRREVERSIBLE-WRITE)",
					"%s changes files, and the tool's side_effects say READ", in)
			}
		}
		if j, dup := seen[in.String()]; dup {
			r.warnf("duplicate-intent", fi, "remove one", "same intent as %s[%d]", f, j)
		} else {
			seen[in.String()] = i
		}
	}
}
