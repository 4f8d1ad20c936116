package policy

import (
	"errors"
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
)

// AutonomyCondition is a compiled autonomy.unsupervised_if expression.
// Variables: every input_schema argument by name (typed by its schema),
// args (all arguments as a map) and context (the call's context map).
type AutonomyCondition struct {
	// Source is the condition as the manifest writes it; CEL is what runs:
	// Source itself, or its translation from seed 002's syntax.
	Source, CEL string
	prg         cel.Program
}

// Translated reports whether the condition was written in seed 002's
// syntax and runs as its CEL translation.
func (c *AutonomyCondition) Translated() bool { return c.CEL != c.Source }

// celReserved are CEL keywords an argument name cannot shadow; such an
// argument is still reachable as args["name"].
var celReserved = map[string]bool{
	"in": true, "as": true, "break": true, "const": true, "continue": true, "else": true,
	"for": true, "function": true, "if": true, "import": true, "let": true, "loop": true,
	"package": true, "namespace": true, "return": true, "var": true, "void": true, "while": true,
	"true": true, "false": true, "null": true, "args": true, "context": true,
}

func celType(s *ParamSchema) *cel.Type {
	var t *cel.Type
	switch s.Type {
	case "string", "enum", TypePath:
		t = cel.StringType
	case "number":
		t = cel.DoubleType
	case "integer":
		t = cel.IntType
	case "boolean":
		t = cel.BoolType
	case "array":
		t = cel.ListType(cel.DynType)
	default:
		t = cel.DynType
	}
	if s.Nullable || !s.IsRequired() {
		return cel.DynType
	}
	return t
}

// CompileAutonomy compiles t.Autonomy.UnsupervisedIf; it returns nil, nil
// when the tool has no condition.
func CompileAutonomy(t *Tool) (*AutonomyCondition, error) {
	src := t.Autonomy.UnsupervisedIf
	if src == "" {
		return nil, nil
	}
	opts := []cel.EnvOption{
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("context", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
	}
	for name, s := range t.InputSchema {
		if s != nil && isIdent(name) && !celReserved[name] {
			opts = append(opts, cel.Variable(name, celType(s)))
		}
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, err
	}
	// A condition is CEL when it compiles as CEL; otherwise it is read as
	// seed 002's syntax ("amount_usd <= 50 AND account.tier != enterprise")
	// and its translation must compile. Seed syntax never compiles as CEL
	// by accident: its AND/OR/=/<> are CEL syntax errors and its bare
	// context names and values are undeclared references.
	expr := src
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		tr, terr := TranslateCondition(src, t.InputSchema)
		if terr != nil {
			if seedSyntax(src) {
				return nil, terr
			}
			return nil, fmt.Errorf("%q: %w", src, iss.Err())
		}
		var iss2 *cel.Issues
		if ast, iss2 = env.Compile(tr); iss2.Err() != nil {
			return nil, fmt.Errorf("%q, read as seed 002's syntax, is the CEL %q: %w", src, tr, iss2.Err())
		}
		expr = tr
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("%q evaluates to %s, not a boolean", expr, ast.OutputType())
	}
	prg, err := env.Program(ast, cel.CostLimit(100_000))
	if err != nil {
		return nil, err
	}
	return &AutonomyCondition{Source: src, CEL: expr, prg: prg}, nil
}

// seedSyntax reports whether src uses seed 002's operators, so that its
// translation's error, not CEL's, is the one that helps.
func seedSyntax(src string) bool {
	toks, err := lexCondition(src)
	if err != nil {
		return false
	}
	for _, t := range toks {
		switch {
		case t.kind == tAnd && t.text != "&&", t.kind == tOr && t.text != "||", t.kind == tNot && t.text != "!":
			return true
		case t.kind == tOp && (t.text == "=" || t.text == "<>"):
			return true
		}
	}
	return false
}

// ErrAutonomyEval means the condition could not be evaluated (a missing
// argument, a type error); callers must treat it as "not unsupervised".
var ErrAutonomyEval = errors.New("autonomy condition could not be evaluated")

// Eval evaluates the condition for one call. Dotted context keys
// ("account.tier") are read as nested maps, as CEL's context.account.tier
// walks them.
func (c *AutonomyCondition) Eval(args, context map[string]any) (bool, error) {
	nested := context
	for k := range context {
		if strings.Contains(k, ".") {
			var err error
			if nested, err = NestContext(context); err != nil {
				return false, fmt.Errorf("%w: %v", ErrAutonomyEval, err)
			}
			break
		}
	}
	vars := map[string]any{"args": orEmpty(args), "context": orEmpty(nested)}
	for k, v := range args {
		if isIdent(k) && !celReserved[k] {
			vars[k] = v
		}
	}
	out, _, err := c.prg.Eval(vars)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrAutonomyEval, err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("%w: result %v is not a boolean", ErrAutonomyEval, out)
	}
	return bool(b), nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}
