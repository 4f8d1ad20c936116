package policy

import (
	"regexp"

	"go.yaml.in/yaml/v3"
)

// Seed 002 writes limits per a key of the call and per unit of time as one
// field name: per_customer_per_day: 5, per_agent_per_minute: 20. klock's own
// form is per_argument: {customer_id: {per_day: 5}} and per_minute: 20 (a
// gateway serves one agent, so "per agent" is the tool's own limit). The
// decoder keeps such fields as ScopedLimits; Parse resolves each to an
// input_schema argument (customer_id, else customer) once the tool's
// schema is known.

// scopedRe matches per_<key>_per_<window>. The key is greedy so that
// per_customer_id_per_day reads as key customer_id.
var scopedRe = regexp.MustCompile(`^per_([a-z][a-z0-9_]*)_per_(run|minute|hour|day)$`)

// ScopedLimit is one seed 002 per_<key>_per_<window> field.
type ScopedLimit struct {
	Key    string // "customer", "agent"
	Window string // run, minute, hour or day
	Limit  int
	Field  string // the field path, for diagnostics
}

func (l *RateLimits) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		d.decodeStruct(n, reflectElem(l), path) // reports the type error
		return
	}
	rest := *n
	rest.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := d.resolve(n.Content[i])
		m := scopedRe.FindStringSubmatch(k.Value)
		if k.Kind != yaml.ScalarNode || m == nil {
			rest.Content = append(rest.Content, n.Content[i], n.Content[i+1])
			continue
		}
		fp := join(path, k.Value)
		for _, s := range l.Scoped {
			if s.Field == fp {
				d.fail(k, fp, "duplicate-field", "keep one", "field %q appears twice", k.Value)
			}
		}
		d.at(k, fp)
		v, ok := d.integer(d.resolve(n.Content[i+1]), fp)
		if !ok {
			continue
		}
		if v < 0 {
			d.fail(n.Content[i+1], fp, "range", "use a non-negative limit (0 means unlimited)", "negative rate limit")
			continue
		}
		l.Scoped = append(l.Scoped, ScopedLimit{Key: m[1], Window: m[2], Limit: int(min(v, 1<<31)), Field: fp})
	}
	d.decodeStruct(&rest, reflectElem(l), path)
}

// window returns the limit of l for a window name, as a pointer to set it.
func (l *RateLimits) window(name string) *int {
	switch name {
	case "run":
		return &l.PerRun
	case "minute":
		return &l.PerMinute
	case "hour":
		return &l.PerHour
	case "day":
		return &l.PerDay
	}
	return nil
}
