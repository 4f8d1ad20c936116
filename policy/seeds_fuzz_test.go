package policy

import (
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	"github.com/klocklabs/klock/policy/money"
	"go.yaml.in/yaml/v3"
)

// normDecimal is a decimal's value as text: no leading zeros in the whole
// part, no trailing zeros in the fraction.
func normDecimal(s string) string {
	whole, frac, _ := strings.Cut(s, ".")
	whole = strings.TrimLeft(whole, "0")
	if whole == "" {
		whole = "0"
	}
	if frac = strings.TrimRight(frac, "0"); frac != "" {
		return whole + "." + frac
	}
	return whole
}

// FuzzDecimalScalar: whatever a YAML scalar holds, DecimalUnits either
// refuses it or returns exactly the value its text writes.
func FuzzDecimalScalar(f *testing.F) {
	for _, s := range []string{"2.00", "0.01", "2", `"2.50"`, "2.001", "1e2", "-1", ".5", "0x10", "1_000", "007.10", "0.000000000000000001", "18446744073709551615", "~", "[1]", "'3.5'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var doc yaml.Node
		if yaml.Unmarshal([]byte("v: "+s), &doc) != nil || len(doc.Content) == 0 || len(doc.Content[0].Content) < 2 {
			return
		}
		n := doc.Content[0].Content[1]
		for _, cur := range []string{"USD", "JPY", "KWD", "ETH"} {
			u, err := DecimalUnits(n, cur)
			if err != nil {
				continue
			}
			a := money.Amount{Units: u, Currency: cur}
			rendered, _, _ := strings.Cut(a.String(), " ")
			if normDecimal(rendered) != normDecimal(strings.TrimSpace(n.Value)) {
				t.Fatalf("%q in %s read as %s", n.Value, cur, a)
			}
		}
	})
}

// FuzzTranslateCondition: a translated condition always parses as CEL, and
// compiling any condition never panics.
func FuzzTranslateCondition(f *testing.F) {
	for _, s := range []string{
		"amount_usd <= 50 AND account.tier != enterprise", "amount_usd <= 50 AND account.tier!= enterprise",
		"NOT (a = 1) OR b <> 'x'", "reason_code = GOODWILL", "x.in == y", "((((", "a <= -0.5", "'unterminated",
		`amount_usd <= 50.0 && context.account.tier != "enterprise"`, "007 < amount_usd", "account.true == 1",
	} {
		f.Add(s)
	}
	args := map[string]*ParamSchema{"amount_usd": {Type: "number"}, "reason_code": {Type: "string"}, "in": {Type: "string"}, "x": {Type: "object"}}
	env, err := cel.NewEnv(cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)), cel.Variable("context", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("amount_usd", cel.DoubleType), cel.Variable("reason_code", cel.StringType), cel.Variable("x", cel.DynType))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		out, err := TranslateCondition(src, args)
		if err == nil {
			if _, iss := env.Parse(out); iss.Err() != nil {
				t.Fatalf("%q translated to %q, which CEL cannot parse: %v", src, out, iss.Err())
			}
		}
		_, _ = CompileAutonomy(&Tool{Name: "t", InputSchema: args, Autonomy: Autonomy{UnsupervisedIf: src}})
	})
}
