package celexpr

import (
	"strings"
	"testing"
)

func TestCompile(t *testing.T) {
	c, err := Compiler{}.Compile(`amount <= 50.0 && context.tier != "enterprise"`, map[string]string{"amount": "double"})
	if err != nil || c.Output() != "bool" {
		t.Fatalf("compile: %v, output %v", err, c)
	}
	ok, err := c.Eval(map[string]any{"amount": 20.0, "args": map[string]any{}, "context": map[string]any{"tier": "free"}})
	if err != nil || !ok {
		t.Fatalf("eval: %v, %v", ok, err)
	}
	if _, err := (Compiler{}).Compile("amount", map[string]string{"amount": "money"}); err == nil || !strings.Contains(err.Error(), "unknown kind") {
		t.Fatalf("a variable of an unknown kind: %v", err)
	}
	if _, err := (Compiler{}).Compile("amount <=", map[string]string{"amount": "double"}); err == nil {
		t.Fatal("a syntax error compiled")
	}
	d, err := Compiler{}.Compile("args.x", nil)
	if err != nil || d.Output() != "dyn" {
		t.Fatalf("a dyn condition: %v, %v", err, d)
	}
	if _, err := d.Eval(map[string]any{"args": map[string]any{"x": 3}, "context": map[string]any{}}); err == nil {
		t.Fatal("a result that is not a boolean was read as one")
	}
}
