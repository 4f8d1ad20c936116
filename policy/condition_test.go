package policy

import (
	"errors"
	"testing"
)

func TestTranslateCondition(t *testing.T) {
	args := map[string]*ParamSchema{
		"amount_usd": {Type: "number"}, "reason_code": {Type: "enum", Values: []string{"GOODWILL"}},
		"customer_id": {Type: "string"}, "urgent": {Type: "boolean"}, "in": {Type: "string"},
	}
	for src, want := range map[string]string{
		"amount_usd <= 50 AND account.tier != enterprise": `amount_usd <= 50 && context.account.tier != "enterprise"`,
		"amount_usd <= 50 AND account.tier!= enterprise":  `amount_usd <= 50 && context.account.tier != "enterprise"`,
		"reason_code = GOODWILL or amount_usd < 10":       `reason_code == "GOODWILL" || amount_usd < 10`,
		"NOT (amount_usd > 100) AND urgent":               `!(amount_usd > 100) && urgent`,
		"customer_id == task.customer_id":                 `customer_id == context.task.customer_id`,
		"amount_usd >= -5 AND reason_code <> 'DUPLICATE'": `amount_usd >= -5 && reason_code != "DUPLICATE"`,
		`args.amount_usd < 1 || context.x == "a b"`:       `args.amount_usd < 1 || context.x == "a b"`,
		"in == x":        `args["in"] == "x"`,
		"urgent == TRUE": `urgent == true`,
	} {
		got, err := TranslateCondition(src, args)
		if err != nil || got != want {
			t.Errorf("TranslateCondition(%q) = %q, %v; want %q", src, got, err, want)
		}
	}
	for src, col := range map[string]int{
		"amount_usd <=":                     14,
		"amount_usd <= 50 AND":              21,
		"amount <= 50":                      1, // not an argument: no guess
		"(amount_usd <= 50":                 18,
		"amount_usd <= 50)":                 17,
		"amount_usd <= 'fifty":              15,
		"amount_usd & 1":                    12,
		"amount_usd <= 5.0.1":               15,
		"amount_usd <= 50 AND tier":         22,
		"context <= 5":                      1,
		"amount_usd <= 50 AND account.tier": 0, // valid: a boolean context value
	} {
		_, err := TranslateCondition(src, args)
		if col == 0 {
			if err != nil {
				t.Errorf("TranslateCondition(%q): %v", src, err)
			}
			continue
		}
		var ce *ConditionError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCondition) || ce.Offset+1 != col || ce.Want == "" {
			t.Errorf("TranslateCondition(%q) err = %v (%+v); want a ConditionError at column %d saying what to write", src, err, ce, col)
		}
	}
}

// A CEL condition runs as written; a seed 002 one runs as its translation;
// a broken seed one reports the translation's located error.
func TestCompileAutonomyReadsBothSyntaxes(t *testing.T) {
	tool := &Tool{Name: "t", InputSchema: map[string]*ParamSchema{"amount_usd": {Type: "number"}}}
	for src, want := range map[string]string{
		`amount_usd <= 50.0 && context.account.tier != "enterprise"`: `amount_usd <= 50.0 && context.account.tier != "enterprise"`,
		"amount_usd <= 50 AND account.tier != enterprise":            `amount_usd <= 50 && context.account.tier != "enterprise"`,
	} {
		tool.Autonomy.UnsupervisedIf = src
		c, err := CompileAutonomy(tool)
		if err != nil || c.CEL != want || c.Source != src {
			t.Errorf("CompileAutonomy(%q) = %+v, %v; want CEL %q", src, c, err, want)
		}
	}
	tool.Autonomy.UnsupervisedIf = "amount_usd <= AND tier = pro"
	if _, err := CompileAutonomy(tool); !errors.Is(err, ErrCondition) {
		t.Errorf("broken seed syntax: %v; want ErrCondition", err)
	}
	tool.Autonomy.UnsupervisedIf = "amount_usd <= 50 && nope"
	if _, err := CompileAutonomy(tool); err == nil || errors.Is(err, ErrCondition) {
		t.Errorf("broken CEL: %v; want CEL's own error", err)
	}
}

func TestNestContext(t *testing.T) {
	got, err := NestContext(map[string]any{"account.tier": "pro", "task.customer_id": "c_42", "task": map[string]any{"team": "t"}, "team_id": "t_5"})
	if err != nil {
		t.Fatal(err)
	}
	acc, _ := got["account"].(map[string]any)
	task, _ := got["task"].(map[string]any)
	if acc["tier"] != "pro" || task["customer_id"] != "c_42" || task["team"] != "t" || got["team_id"] != "t_5" {
		t.Errorf("NestContext = %v", got)
	}
	for _, bad := range []map[string]any{
		{"account": "x", "account.tier": "pro"},
		{"a..b": "x"},
		{"a.b": "x", "a": map[string]any{"b": "y"}},
	} {
		if _, err := NestContext(bad); !errors.Is(err, ErrContext) {
			t.Errorf("NestContext(%v) err = %v; want ErrContext", bad, err)
		}
	}
}
