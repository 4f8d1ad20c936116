package main

import (
	"errors"
	"reflect"
	"testing"

	"github.com/klocklabs/klock/policy"
)

// klock mcp --context account.tier=pro supplies nested
// context, which the seed 002 condition reads as context.account.tier.
func TestParseContextNests(t *testing.T) {
	got, err := parseContext([]string{"account.tier=pro", "task.customer_id=c_42", "team_id=t_5"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"account": map[string]any{"tier": "pro"},
		"task":    map[string]any{"customer_id": "c_42"},
		"team_id": "t_5",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseContext = %v; want %v", got, want)
	}
	tool := &policy.Tool{Name: "issue_refund", InputSchema: map[string]*policy.ParamSchema{"amount_usd": {Type: "number"}},
		Autonomy: policy.Autonomy{UnsupervisedIf: "amount_usd <= 50 AND account.tier != enterprise"}}
	c, err := policy.CompileAutonomy(tool)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Eval(map[string]any{"amount_usd": 20.0}, got); !ok || err != nil {
		t.Errorf("condition with --context account.tier=pro = %v, %v; want true", ok, err)
	}
	for _, bad := range [][]string{{"account=x", "account.tier=pro"}, {"a=1", "a=2"}, {"noequals"}, {"a..b=1"}} {
		if _, err := parseContext(bad); err == nil {
			t.Errorf("parseContext(%q) accepted", bad)
		} else if len(bad) == 2 && bad[0] == "account=x" && !errors.Is(err, policy.ErrContext) {
			t.Errorf("parseContext(%q) err = %v; want ErrContext", bad, err)
		}
	}
}
