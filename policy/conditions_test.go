package policy

import (
	"errors"
	"testing"

	"github.com/klocklabs/klock/policy/celexpr"
)

// The package's tests check and run conditions as klockd does.
func init() { UseConditions(celexpr.Compiler{}) }

// TestWithoutConditions: a binary that installed no compiler
// (klock-runtime) parses a manifest whose tool has a condition, and
// cannot run it: it says so instead of reading the condition as false or
// true.
func TestWithoutConditions(t *testing.T) {
	UseConditions(nil)
	defer UseConditions(celexpr.Compiler{})
	tool := &Tool{Name: "refund", InputSchema: map[string]*ParamSchema{"amount_usd": {Type: "number"}},
		Autonomy: Autonomy{UnsupervisedIf: "amount_usd <= 50"}}
	if _, err := CompileAutonomy(tool); !errors.Is(err, ErrNoConditions) {
		t.Fatalf("CompileAutonomy without a compiler: %v, want ErrNoConditions", err)
	}
	if _, err := Load("../examples/manifests/refund-agent.yaml"); err != nil {
		t.Fatalf("a manifest with conditions, parsed without a compiler: %v", err)
	}
	if _, err := Load("../examples/manifests/invalid/bad-cel.yaml"); err != nil {
		t.Fatalf("a bad condition is left to the binary that runs it: %v", err)
	}
	UseConditions(celexpr.Compiler{})
	if _, err := Load("../examples/manifests/invalid/bad-cel.yaml"); err == nil {
		t.Fatal("a bad condition passed with the compiler installed")
	}
}
