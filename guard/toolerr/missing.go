package toolerr

import "encoding/json"

// Missing is what a null becomes on its way to the agent (seed 002): an
// explicit sentinel the agent's instructions can name ("when a required
// field is MISSING, escalate"), never the string "null" a serializer made up.
const Missing = "MISSING"

// ReplaceNulls returns v with every JSON null (top-level, in objects and in
// arrays) replaced by Missing, and whether any was replaced. v is a value as
// decoded by encoding/json (map[string]any, []any, ...); it is rewritten in
// place where it is a map or a slice.
func ReplaceNulls(v any) (any, bool) {
	switch x := v.(type) {
	case nil:
		return Missing, true
	case map[string]any:
		hit := false
		for k, e := range x {
			n, r := ReplaceNulls(e)
			x[k] = n
			hit = hit || r
		}
		return x, hit
	case []any:
		hit := false
		for i, e := range x {
			n, r := ReplaceNulls(e)
			x[i] = n
			hit = hit || r
		}
		return x, hit
	default:
		return v, false
	}
}

// ReplaceNullsJSON applies ReplaceNulls to a JSON document; it returns the
// input unchanged when it holds no null or does not parse (the caller's
// framing check is the one that reports bad JSON).
func ReplaceNullsJSON(doc []byte) []byte {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return doc
	}
	n, changed := ReplaceNulls(v)
	if !changed {
		return doc
	}
	out, err := json.Marshal(n)
	if err != nil {
		return doc
	}
	return out
}
