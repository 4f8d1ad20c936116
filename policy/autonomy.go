package policy

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// AutonomyCondition is a compiled autonomy.unsupervised_if expression.
// Variables: every input_schema argument by name (typed by its schema),
// args (all arguments as a map) and context (the call's context map).
type AutonomyCondition struct {
	// Source is the condition as the manifest writes it; CEL is what runs:
	// Source itself, or its translation from seed 002's syntax.
	Source, CEL string
	prg         ConditionProgram
}

// ConditionCompiler compiles an autonomy condition's CEL: expr with the
// maps args and context and each of vars (name → "string", "double",
// "int", "bool", "list" or "dyn") declared. policy/celexpr is klock's, with
// cel-go; a binary installs it with UseConditions.
type ConditionCompiler interface {
	Compile(expr string, vars map[string]string) (ConditionProgram, error)
}

// ConditionProgram is a compiled condition (an alias of an interface type,
// so that policy/celexpr satisfies ConditionCompiler without importing
// this package).
type ConditionProgram = interface {
	// Output is the CEL type of the result ("bool", "dyn", ...).
	Output() string
	// Eval runs the condition over its variables.
	Eval(vars map[string]any) (bool, error)
}

// ErrNoConditions: the binary installed no ConditionCompiler, so it can
// neither check nor run an autonomy condition. Validate then leaves the
// condition to the binary that runs it (klockd and klock-cli check it).
var ErrNoConditions = errors.New("no CEL compiler for autonomy conditions in this binary (policy.UseConditions)")

var conditions struct {
	sync.RWMutex
	c ConditionCompiler
}

// UseConditions installs the compiler of autonomy conditions (nil removes
// it).
func UseConditions(c ConditionCompiler) {
	conditions.Lock()
	conditions.c = c
	conditions.Unlock()
}

func conditionCompiler() ConditionCompiler {
	conditions.RLock()
	defer conditions.RUnlock()
	return conditions.c
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

// conditionKind is the kind a condition sees an argument as
// (ConditionCompiler's vars): an optional or nullable one may be null, so
// it is dyn.
func conditionKind(s *ParamSchema) string {
	if s.Nullable || !s.IsRequired() {
		return "dyn"
	}
	switch s.Type {
	case "string", "enum", TypePath:
		return "string"
	case "number":
		return "double"
	case "integer":
		return "int"
	case "boolean":
		return "bool"
	case "array":
		return "list"
	}
	return "dyn"
}

// CompileAutonomy compiles t.Autonomy.UnsupervisedIf; it returns nil, nil
// when the tool has no condition.
func CompileAutonomy(t *Tool) (*AutonomyCondition, error) {
	src := t.Autonomy.UnsupervisedIf
	if src == "" {
		return nil, nil
	}
	cc := conditionCompiler()
	if cc == nil {
		return nil, ErrNoConditions
	}
	vars := map[string]string{}
	for name, s := range t.InputSchema {
		if s != nil && isIdent(name) && !celReserved[name] {
			vars[name] = conditionKind(s)
		}
	}
	// A condition is CEL when it compiles as CEL; otherwise it is read as
	// seed 002's syntax ("amount_usd <= 50 AND account.tier != enterprise")
	// and its translation must compile. Seed syntax never compiles as CEL
	// by accident: its AND/OR/=/<> are CEL syntax errors and its bare
	// context names and values are undeclared references.
	expr := src
	prg, err := cc.Compile(src, vars)
	if err != nil {
		tr, terr := TranslateCondition(src, t.InputSchema)
		if terr != nil {
			if seedSyntax(src) {
				return nil, terr
			}
			return nil, fmt.Errorf("%q: %w", src, err)
		}
		var err2 error
		if prg, err2 = cc.Compile(tr, vars); err2 != nil {
			return nil, fmt.Errorf("%q, read as seed 002's syntax, is the CEL %q: %w", src, tr, err2)
		}
		expr = tr
	}
	if out := prg.Output(); out != "bool" && out != "dyn" {
		return nil, fmt.Errorf("%q evaluates to %s, not a boolean", expr, out)
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
	ok, err := c.prg.Eval(vars)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrAutonomyEval, err)
	}
	return ok, nil
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
