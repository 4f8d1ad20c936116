package policy

import (
	"errors"
	"fmt"
	"strings"
)

// A call's context reaches klock flat (--context account.tier=pro, a JSON
// body with "task.customer_id") or nested ({"account": {"tier": "pro"}}).
// CEL reads context.account.tier by walking maps, so a dotted key must
// become nested maps; must_match bindings read either form.

// ErrContext is wrapped by every error NestContext returns.
var ErrContext = errors.New("invalid call context")

// NestContext returns ctx with each dotted key ("account.tier") moved into
// nested maps (account: {tier: ...}); keys without a dot and nested maps are
// kept. A key that is both a value and a map ("account=x" with
// "account.tier=y") is an error naming both, since either reading would
// drop the other. ctx is not modified.
func NestContext(ctx map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(ctx))
	for k, v := range ctx {
		if !strings.Contains(k, ".") {
			if err := put(out, []string{k}, v, k); err != nil {
				return nil, err
			}
		}
	}
	for k, v := range ctx {
		if strings.Contains(k, ".") {
			parts := strings.Split(k, ".")
			for _, p := range parts {
				if p == "" {
					return nil, fmt.Errorf("%w: key %q has an empty part: write names joined by single dots, e.g. account.tier", ErrContext, k)
				}
			}
			if err := put(out, parts, v, k); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// put sets path in m to v, merging maps; key is the key as given, for errors.
func put(m map[string]any, path []string, v any, key string) error {
	for i, p := range path[:len(path)-1] {
		switch cur := m[p].(type) {
		case nil:
			next := map[string]any{}
			m[p] = next
			m = next
		case map[string]any:
			m = cur // out's own copy (cloneMaps)
		default:
			return fmt.Errorf("%w: %q needs %s to be a map, but %s is the value %v: give one of them", ErrContext, key, strings.Join(path[:i+1], "."), strings.Join(path[:i+1], "."), cur)
		}
	}
	last := path[len(path)-1]
	if old, ok := m[last]; ok {
		om, oldIsMap := old.(map[string]any)
		nm, newIsMap := v.(map[string]any)
		switch {
		case oldIsMap && newIsMap:
			for k, e := range nm {
				if err := put(om, []string{k}, e, key+"."+k); err != nil {
					return err
				}
			}
			return nil
		default:
			return fmt.Errorf("%w: %q is given twice (as %v and %v): give it once", ErrContext, key, old, v)
		}
	}
	m[last] = cloneMaps(v)
	return nil
}

// cloneMaps copies nested maps so merging never writes to the caller's.
func cloneMaps(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, e := range m {
		out[k] = cloneMaps(e)
	}
	return out
}

// OverlayContext returns base with over's values laid on top, key by key
// through nested maps: over wins wherever both set a value, and base keeps
// what over does not set. Both must already be nested (NestContext). The
// gateway uses it so that the operator's context (--context) wins over the
// context a request sends, however either spells it.
func OverlayContext(base, over map[string]any) map[string]any {
	out, _ := cloneMaps(base).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range over {
		bm, bok := out[k].(map[string]any)
		om, ook := v.(map[string]any)
		if bok && ook {
			out[k] = OverlayContext(bm, om)
			continue
		}
		out[k] = cloneMaps(v)
	}
	return out
}
