package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// brokenBase is a valid manifest; each case below breaks one line of it.
var brokenBase = []string{
	"apiVersion: klock/v1",                 // 1
	"agent:",                               // 2
	"  id: syntax-01",                      // 3
	"workdir: /srv/repo",                   // 4
	"intents:",                             // 5
	"  - CONSUMES FILE:${workdir}/**",      // 6
	"  - MUTATES FILE:${workdir}/src/**",   // 7
	"declared_tools:",                      // 8
	"  - name: read_file",                  // 9
	"    blast_radius: read",               // 10
	"    side_effects: READ",               // 11
	"    input_schema:",                    // 12
	"      path: {type: path,",             // 13
	"             within: [/srv/repo]}",    // 14 (a valid flow mapping over two lines)
	"      limit:",                         // 15
	"        type: integer",                // 16
	"        max: 100",                     // 17
	"        description: 'lines, don''t'", // 18
	"cost_envelope:",                       // 19
	"  expected_tokens_in: 1",              // 20
	"  max_tokens_in: 2",                   // 21
	"  expected_tokens_out: 1",             // 22
	"  max_tokens_out: 2",                  // 23
	"  expected_latency_ms: 1",             // 24
	"  max_latency_ms: 2",                  // 25
	"  context_efficiency: 0.7",            // 26
	"  expected_cost: \"0.01 USD\"",        // 27
	"  max_cost: \"0.02 USD\"",             // 28
	"hitl:",                                // 29
	"  default_mode: HOTL",                 // 30
}

// TestSyntaxErrorPosition: a syntax error is reported at its own line and
// column, not at the first line of the block the parser was in (libyaml's
// "line N" is that block's: indent.yaml:9:1 for an error on line 32).
func TestSyntaxErrorPosition(t *testing.T) {
	if _, err := Parse("base.yaml", []byte(strings.Join(brokenBase, "\n"))); err != nil {
		t.Fatalf("the base manifest must be valid: %v", err)
	}
	tests := []struct {
		name     string
		line     int    // 1-based line of brokenBase replaced
		with     string // its replacement
		wantLine int
		wantCol  int
		note     string // in the problem
	}{
		{"bad indent deep in a block", 17, "       max: 100", 17, 8, "in the block that starts at line"},
		{"key outdented into the list", 11, "   side_effects: READ", 11, 4, ""},
		{"tab indent", 24, "\texpected_latency_ms: 1", 24, 1, ""},
		{"flow list opened over block items", 5, "intents: [", 6, 3, "the [ opened at line 5 column 10 is still open here"},
		{"unterminated quote runs into the next line", 27, "  expected_cost: \"0.01 USD", 28, 3, ""},
		{"missing close of a flow map", 14, "             within: [/srv/repo]", 15, 7, "the { opened at line 13 column 13"},
		{"mapping value in a plain scalar", 22, "  expected_tokens_out: 1: 2", 22, 3, ""},
		{"sequence item in a mapping", 26, "  - context_efficiency: 0.7", 26, 3, ""},
		{"never closed", 30, "  default_mode: [HOTL", 30, 17, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := append([]string(nil), brokenBase...)
			lines[tt.line-1] = tt.with
			_, err := Parse("broken.yaml", []byte(strings.Join(lines, "\n")+"\n"))
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Diags) != 1 || ve.Diags[0].Code != "syntax" {
				t.Fatalf("want one syntax error, got %v", err)
			}
			want := fmt.Sprintf("broken.yaml:%d:%d", tt.wantLine, tt.wantCol)
			if got := ve.Diags[0].Pos.String(); got != want {
				t.Fatalf("at %s, want %s: %s", got, want, ve.Diags[0])
			}
			if !strings.Contains(ve.Diags[0].Problem, tt.note) {
				t.Fatalf("%s: want the note %q", ve.Diags[0], tt.note)
			}
		})
	}
}

// TestSyntaxErrorPositionJSON: in a JSON manifest everything is one flow
// mapping; the error is still found on its line.
func TestSyntaxErrorPositionJSON(t *testing.T) {
	src := "{\n  \"apiVersion\": \"klock/v1\",\n  \"agent\": {\"id\": \"j-01\"},\n  \"intents\": [\"CONSUMES FILE:/w/**\",\n    \"MUTATES FILE:/w/src/**\"],\n" +
		"  \"mode\": \"strict\"\n  \"baseline\": \"none\"\n}\n"
	_, err := Parse("m.json", []byte(src))
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Diags[0].Pos.Line != 7 {
		t.Fatalf("missing comma after line 6, reported at %v", err)
	}
}

// TestSyntaxErrorExamples: the invalid examples of syntax still point at
// their error (examples_test checks the header; this one checks a file
// whose block starts far above the error).
func TestSyntaxErrorFarBelowItsBlock(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: klock/v1\nagent: {id: far-01}\nintents:\n")
	for i := 0; i < 28; i++ {
		fmt.Fprintf(&b, "  - CONSUMES FILE:/srv/d%d/**\n", i)
	}
	b.WriteString(" - CONSUMES FILE:/srv/bad/**\n") // line 32, one space short
	_, err := Parse("indent.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "indent.yaml:32:") {
		t.Fatalf("error on line 32 reported as: %v", err)
	}
}

// FuzzSyntaxPos: whatever the input, syntaxPos returns a position inside
// the file (or none), and never panics.
func FuzzSyntaxPos(f *testing.F) {
	f.Add([]byte(strings.Join(brokenBase, "\n")))
	f.Add([]byte("a: [\n  'x'',\n  \"y\\\"\n# c [\n"))
	f.Add([]byte("{\"a\": [1,\n 2 3]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		line, col, _, ok := syntaxPos(data)
		if !ok {
			return
		}
		lines := strings.Split(string(data), "\n")
		if line < 1 || line > len(lines) || col < 1 || col > len(lines[line-1])+1 {
			t.Fatalf("position %d:%d outside the input (%d lines)", line, col, len(lines))
		}
	})
}
