package policy

import (
	"fmt"
	"strings"
)

// The seeds write some fields differently from klock's own form: KCC's
// *_usd decimals, seed 002's tool: and per_<key>_per_<window> and its
// "ESCALATE for human approval". A manifest copied from a seed loads: Parse
// folds each spelling into klock's form here, before validation, so every
// later reader (validation, the permissions matrix, the gateway) sees one
// form. What a seed leaves out gets the safe default, with a warning that
// says so.

func normalize(m *Manifest, r *report) {
	if c := m.CostEnvelope; c != nil {
		c.ExpectedCost = foldUSD(m, r, "cost_envelope.expected_cost", c.ExpectedCost, c.ExpectedCostUSD)
		c.MaxCost = foldUSD(m, r, "cost_envelope.max_cost", c.MaxCost, c.MaxCostUSD)
	}
	for i := range m.DeclaredTools {
		t := &m.DeclaredTools[i]
		f := fmt.Sprintf("declared_tools[%d]", i)
		foldToolName(m, r, t, f)
		foldElse(t)
		foldScopedLimits(r, t, &t.RateLimits, f+".rate_limits")
		for arg, sub := range t.RateLimits.PerArgument {
			if len(sub.Scoped) > 0 {
				r.errorf("format", sub.Scoped[0].Field, "limit by one argument at a time", "%s inside per_argument.%s", sub.Scoped[0].Field[strings.LastIndex(sub.Scoped[0].Field, ".")+1:], arg)
			}
		}
		safeDefaults(m, r, t, f)
	}
}

// foldUSD moves a KCC *_usd value into its klock field, refusing both.
func foldUSD(m *Manifest, r *report, field string, klock *Money, usd *USDDecimal) *Money {
	if usd == nil {
		return klock
	}
	if klock != nil {
		r.errorf("conflict", field+"_usd", "keep one of "+field[strings.LastIndex(field, ".")+1:]+" and its _usd form", "%s and %s_usd are both set", field, field)
		return klock
	}
	// Validation asks whether the klock field was written: it was, as _usd.
	if _, ok := m.pos[field]; !ok {
		m.pos[field] = m.pos[field+"_usd"]
	}
	return &usd.Money
}

func foldToolName(m *Manifest, r *report, t *Tool, f string) {
	switch {
	case t.ToolName == "":
	case t.Name == "":
		t.Name = t.ToolName
		m.pos[f+".name"] = m.pos[f+".tool"]
	case t.Name != t.ToolName:
		r.errorf("conflict", f+".tool", "keep one of name and tool (seed 002's spelling of name)", "name %q and tool %q differ", t.Name, t.ToolName)
	}
}

// foldElse splits "ESCALATE for human approval" into the verdict and a note.
func foldElse(t *Tool) {
	word, note, _ := strings.Cut(strings.TrimSpace(t.Autonomy.Else), " ")
	if word == "ESCALATE" || word == "DENY" {
		t.Autonomy.Else, t.Autonomy.ElseNote = word, strings.TrimSpace(note)
	}
}

// foldScopedLimits resolves per_<key>_per_<window>: key agent is the tool's
// own limit (a gateway serves one agent); any other key names the argument
// <key>_id or <key>. Where a limit is also written in klock's form, the
// lower applies, as it would if both were enforced.
func foldScopedLimits(r *report, t *Tool, l *RateLimits, f string) {
	set := func(s ScopedLimit, target *int) {
		if *target != 0 && *target != s.Limit {
			r.warnf("rate-mismatch", s.Field, "keep one value", "%s (%d) and the limit written in klock's form (%d) differ; the lower applies", s.Field[len(f)+1:], s.Limit, *target)
			*target = min(*target, s.Limit)
			return
		}
		*target = s.Limit
	}
	for _, s := range l.Scoped {
		if s.Key == "agent" {
			set(s, l.window(s.Window))
			continue
		}
		arg := ""
		for _, cand := range []string{s.Key + "_id", s.Key} {
			if t.InputSchema[cand] != nil {
				arg = cand
				break
			}
		}
		switch {
		case arg == "":
			r.errorf("unknown-argument", s.Field,
				fmt.Sprintf("add %s_id (or %s) to input_schema, or write per_argument: {<argument>: {per_%s: %d}}", s.Key, s.Key, s.Window, s.Limit),
				"%s limits calls per %s, and %s has no argument %s_id or %s to tell them apart", s.Field[len(f)+1:], s.Key, t.Name, s.Key, s.Key)
		case s.Window == "run":
			r.errorf("format", s.Field, "limit per argument per minute, hour or day; per_run counts the whole run", "a per-run limit per %s is not enforced", arg)
		default:
			if l.PerArgument == nil {
				l.PerArgument = map[string]RateLimits{}
			}
			sub := l.PerArgument[arg]
			set(s, sub.window(s.Window))
			l.PerArgument[arg] = sub
		}
	}
}

// seed002Fields reports whether t declares any Tool Trust Contract property:
// a tool with none is declared in KCC's terms only.
func seed002Fields(m *Manifest, f string) bool {
	for _, k := range []string{"permission", "input_schema", "output_schema", "idempotency", "rollback", "rate_limits", "audit_logging", "autonomy"} {
		if m.has(f + "." + k) {
			return true
		}
	}
	return false
}

// safeDefaults fills what a seed leaves out with the value that allows
// least. A KCC-only tool (no contract property) gets seed 002's safest
// class, IRREVERSIBLE-WRITE, not idempotent: never retried blindly, every
// call approved by a human. A contract that forgot side_effects is still
// refused: its author was classifying the tool and must finish. A tool
// without KCC's blast_radius (a seed 002 contract) counts as organizational,
// the widest: HOTL then needs maintainer approval, so the default can only
// ask for more oversight, never less.
func safeDefaults(m *Manifest, r *report, t *Tool, f string) {
	if t.SideEffects == "" && !seed002Fields(m, f) {
		t.SideEffects = SideEffectIrreversibleWrite
		if t.Idempotency.Mode == "" {
			t.Idempotency.Mode = "none"
		}
		r.warnf("defaulted", f+".side_effects",
			"declare side_effects: READ, REVERSIBLE-WRITE (with rollback) or IRREVERSIBLE-WRITE",
			"%s declares no Tool Trust Contract: treated as IRREVERSIBLE-WRITE, not idempotent, every call approved by a human (seed 002's safe default)", t.Name)
	}
	if t.BlastRadius == "" {
		t.BlastRadius = "organizational"
		r.warnf("defaulted", f+".blast_radius",
			"declare blast_radius: read, local, domain or organizational (KCC surface 4)",
			"%s declares no blast radius: treated as organizational, the widest (HOTL then needs maintainer approval)", t.Name)
	}
}
