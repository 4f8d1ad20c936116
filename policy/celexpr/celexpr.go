package celexpr

import (
	"fmt"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
)

// Compiler compiles conditions (policy.ConditionCompiler).
type Compiler struct{}

// Condition is a compiled condition. It is an alias of an interface type,
// the same type as policy.ConditionProgram, so that Compiler satisfies
// policy's interface without importing it.
type Condition = interface {
	// Output is the CEL type of the result ("bool", "dyn", ...).
	Output() string
	// Eval runs the condition over its variables.
	Eval(vars map[string]any) (bool, error)
}

// Kinds a variable may be declared as (policy's names for the CEL types
// its arguments' schemas give).
var kinds = map[string]*cel.Type{
	"string": cel.StringType,
	"double": cel.DoubleType,
	"int":    cel.IntType,
	"bool":   cel.BoolType,
	"list":   cel.ListType(cel.DynType),
	"dyn":    cel.DynType,
}

// Compile compiles expr with args and context (maps of anything) and each
// of vars (name → kind) declared; numbers compare across int and double.
// The program's cost is bounded (100,000).
func (Compiler) Compile(expr string, vars map[string]string) (Condition, error) {
	opts := []cel.EnvOption{
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("context", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
	}
	for name, kind := range vars {
		t, ok := kinds[kind]
		if !ok {
			return nil, fmt.Errorf("celexpr: variable %s of unknown kind %q", name, kind)
		}
		opts = append(opts, cel.Variable(name, t))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	prg, err := env.Program(ast, cel.CostLimit(100_000))
	if err != nil {
		return nil, err
	}
	return program{prg: prg, output: ast.OutputType().String()}, nil
}

type program struct {
	prg    cel.Program
	output string
}

func (p program) Output() string { return p.output }

// Eval: a result that is not a boolean is an error.
func (p program) Eval(vars map[string]any) (bool, error) {
	out, _, err := p.prg.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("result %v is not a boolean", out)
	}
	return bool(b), nil
}
