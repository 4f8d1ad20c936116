package main

import (
	"fmt"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// parseContext turns --context KEY=VALUE flags into the call context. A
// dotted key builds nested maps (account.tier=pro is {account: {tier:
// pro}}), the shape unsupervised_if's context.account.tier and must_match's
// task.customer_id read. Values stay strings: the gateway compares a bound
// argument with a string context value by its text.
func parseContext(kvs []string) (map[string]any, error) {
	flat := map[string]any{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--context %q: want KEY=VALUE, e.g. task.customer_id=c_42 or account.tier=pro", kv)
		}
		if _, dup := flat[k]; dup {
			return nil, fmt.Errorf("--context %s is given twice: give each key once", k)
		}
		flat[k] = v
	}
	ctx, err := policy.NestContext(flat)
	if err != nil {
		return nil, fmt.Errorf("--context: %w", err)
	}
	return ctx, nil
}
