package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParsePermEntry(t *testing.T) {
	for _, tc := range []struct {
		in, path, arg, glob string
		bad                 bool
	}{
		{in: "/srv/data/**", path: "/srv/data/**"},
		{in: "${workdir}/.git/**", path: "${workdir}/.git/**"},
		{in: "customer_id=cus_*", arg: "customer_id", glob: "cus_*"},
		{in: "*=*payout*", arg: "*", glob: "*payout*"},
		{in: "payouts", bad: true},
		{in: "cross-customer access", bad: true},
		{in: "plan changes=x", bad: true},
		{in: "to=", bad: true},
		{in: `to=a\`, bad: true},
		{in: "/srv/*.pem", bad: true},
		{in: "/srv/../etc", bad: true},
	} {
		e, err := ParsePermEntry(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrPermEntry) {
				t.Errorf("%q: %v, want ErrPermEntry", tc.in, err)
			}
			continue
		}
		got := ""
		if e.Path != nil {
			got = e.Path.String()
		}
		if err != nil || got != tc.path || e.Arg != tc.arg || e.Glob != tc.glob {
			t.Errorf("%q: %+v %v", tc.in, e, err)
		}
	}
}

func TestPermEntryGlob(t *testing.T) {
	for _, tc := range []struct {
		glob, s string
		want    bool
	}{
		{"acct_*", "acct_1", true}, {"acct_*", "xacct_1", false}, {"*payout*", "po: payout 3", true},
		{"https://evil.example/*", "https://evil.example/a/b", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"a?c", "aéc", true}, {`\*`, "*", true}, {`\*`, "x", false}, {"*", "", true}, {"x", "X", false},
	} {
		if got := (PermEntry{Glob: tc.glob}).MatchValue(tc.s); got != tc.want {
			t.Errorf("%q ~ %q: %v, want %v", tc.glob, tc.s, got, tc.want)
		}
	}
}

// A permission the gateway could not check is refused, located, entry by
// entry; seed 002's one-string form is a list of entries.
func TestPermissionValidation(t *testing.T) {
	tool := func(perm string) string {
		return "  - {name: t1, blast_radius: read, side_effects: READ, permission: " + perm + ", input_schema: {to: {type: string}, p: {type: path, within: [/w]}}}\n"
	}
	ok := mustParse(t, manifest([]string{"CONSUMES FILE:/w/**"}, tool(`{acts_as: svc, scope: "to=a_*, /w/**", forbidden: ["/w/secret/**", "*=*payout*"]}`)))
	if p := ok.DeclaredTools[0].Permission; !slices.Equal(p.Scope, []string{"to=a_*", "/w/**"}) || len(p.Forbidden) != 2 {
		t.Fatalf("permission %+v", p)
	}
	for perm, want := range map[string]string{
		`{forbidden: "payouts"}`:                        "unenforceable permission.forbidden[0]",
		`{forbidden: "/w/x/**, plan changes"}`:          "unenforceable permission.forbidden[1]",
		`{scope: ["from=x"]}`:                           "unknown-argument permission.scope[0]",
		`{scope: ["*=x"]}`:                              "format permission.scope[0]",
		"{acts_as: \"svc\\nroot\"}":                     "format permission.acts_as",
		`{forbidden: ["/w/**"]}, description: "x"`:      "",
		`{scope: ["/w/**"], forbidden: ["to=*@evil*"]}`: "",
	} {
		_, err := Parse("test.yaml", []byte(manifest([]string{"CONSUMES FILE:/w/**"}, tool(perm))))
		var got []string
		var ve *ValidationError
		if errors.As(err, &ve) {
			for _, d := range ve.Diags {
				got = append(got, d.Code+" "+d.Field[strings.Index(d.Field, "]")+2:])
			}
		}
		if want == "" && err != nil || want != "" && (len(got) != 1 || got[0] != want) {
			t.Errorf("%s: %v, want %q", perm, got, want)
		}
	}
	// A path entry on a tool whose schema reads no argument as a path checks nothing.
	_, err := Parse("test.yaml", []byte(manifest([]string{"CONSUMES FILE:/w/**"},
		"  - {name: t1, blast_radius: read, side_effects: READ, permission: {forbidden: [/w/secret/**]}, input_schema: {to: {type: string}}}\n")))
	if c := codes(err); !slices.Equal(c, []string{"unenforceable"}) {
		t.Errorf("a path entry without a path argument: %v", err)
	}
}
