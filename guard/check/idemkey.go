package check

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/gowebpki/jcs"
	"github.com/klocklabs/klock/policy"
)

// keySourceRe reads seed 002's key_source: hash(a, b, c).
var keySourceRe = regexp.MustCompile(`^\s*hash\s*\(([^()]*)\)\s*$`)

// keyArgs returns the arguments key_source names; "hash(*)" or "hash()"
// mean every argument (nil).
func keyArgs(t *policy.Tool) ([]string, error) {
	m := keySourceRe.FindStringSubmatch(t.Idempotency.KeySource)
	if m == nil {
		return nil, fmt.Errorf("idempotency.key_source %q: write hash(arg, ...) naming input_schema arguments", t.Idempotency.KeySource)
	}
	var out []string
	for _, a := range strings.Split(m[1], ",") {
		a = strings.TrimSpace(a)
		if a == "" || a == "*" {
			continue
		}
		if len(t.InputSchema) > 0 {
			if _, ok := t.InputSchema[a]; !ok {
				return nil, fmt.Errorf("idempotency.key_source names %q, which is not an argument of input_schema", a)
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// idemKey is sha256 over the RFC 8785 canonical JSON of [tool, {arg: value}]
// for the key arguments (all arguments when names is nil): the same
// arguments give the same key whatever their order or spacing on the wire.
func idemKey(tool string, names []string, args map[string]any) (string, error) {
	sel := args
	if names != nil {
		sel = make(map[string]any, len(names))
		for _, n := range names {
			v, ok := args[n]
			if !ok {
				return "", fmt.Errorf("idempotency key argument %q is missing", n)
			}
			sel[n] = v
		}
	}
	raw, err := json.Marshal([]any{tool, sel})
	if err != nil {
		return "", err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(canon)
	return hex.EncodeToString(s[:]), nil
}
