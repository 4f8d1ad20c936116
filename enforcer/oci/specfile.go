package oci

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// DecodeSpec reads config.json. It refuses (ErrSpecFields) a spec with
// fields this build's runtime-spec types do not hold: a rewrite marshals
// the spec again, and a field it dropped could be one that confines the
// container. Fields it would write back equal (a false, an empty list)
// are not counted.
func DecodeSpec(data []byte) (*specs.Spec, error) {
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("%w: config.json: %w", ErrBadSpec, err)
	}
	again, err := json.Marshal(&spec)
	if err != nil {
		return nil, fmt.Errorf("%w: config.json: %w", ErrBadSpec, err)
	}
	var orig, back any
	if err := decodeGeneric(data, &orig); err != nil {
		return nil, fmt.Errorf("%w: config.json: %w", ErrBadSpec, err)
	}
	if err := decodeGeneric(again, &back); err != nil {
		return nil, fmt.Errorf("%w: config.json: %w", ErrBadSpec, err)
	}
	var lost []string
	diff("", prune(orig), prune(back), &lost)
	if len(lost) > 0 {
		slices.Sort(lost)
		return nil, fmt.Errorf("%w (github.com/opencontainers/runtime-spec %s): %s; a rewrite would drop them, so klock-runtime refuses the container rather than run it without them",
			ErrSpecFields, specs.Version, strings.Join(lost, ", "))
	}
	return &spec, nil
}

// EncodeSpec renders the rewritten config.json.
func EncodeSpec(spec *specs.Spec) ([]byte, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSpec, err)
	}
	return data, nil
}

func decodeGeneric(data []byte, v *any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber() // uint64 seccomp values must compare exactly
	return d.Decode(v)
}

// prune drops zero values (false, "", 0, null, empty lists and objects):
// omitempty drops them on the way back, and they mean the same absent.
func prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if p := prune(e); p != nil {
				out[k] = p
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		if len(x) == 0 {
			return nil
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = prune(e)
			if out[i] == nil {
				out[i] = struct{}{} // keep positions
			}
		}
		return out
	case bool:
		if !x {
			return nil
		}
	case string:
		if x == "" {
			return nil
		}
	case json.Number:
		if f, err := x.Float64(); err == nil && f == 0 {
			return nil
		}
	case nil:
		return nil
	}
	return v
}

// diff records the paths where orig holds something back does not.
func diff(at string, orig, back any, lost *[]string) {
	if reflect.DeepEqual(orig, back) {
		return
	}
	switch o := orig.(type) {
	case map[string]any:
		b, _ := back.(map[string]any)
		for k, v := range o {
			diff(at+"."+k, v, b[k], lost)
		}
		return
	case []any:
		b, _ := back.([]any)
		for i, v := range o {
			var bv any
			if i < len(b) {
				bv = b[i]
			}
			diff(fmt.Sprintf("%s[%d]", at, i), v, bv, lost)
		}
		return
	}
	*lost = append(*lost, strings.TrimPrefix(at, "."))
}
