package check

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// pathTree builds root/{data/{hello.txt, sub/inner/, src/, in -> sub,
// inner -> sub/inner, out -> ../outside, abs -> root/outside, loop -> loop,
// up -> .., deep -> sub/../..}, outside/secret.txt}
// and a pipeline whose tools confine "path" to root/data.
func pathTree(t testing.TB) (string, *Pipeline) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"data/sub/inner", "data/src", "outside"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"data/hello.txt", "data/src/main.go", "outside/secret.txt"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{
		"in": "sub", "out": "../outside", "abs": filepath.Join(root, "outside"),
		"loop": "loop", "up": "..", "srclink": "src", "deep": "sub/../..", "inner": "sub/inner",
	} {
		if err := os.Symlink(target, filepath.Join(root, "data", name)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := policy.Parse("paths.yaml", []byte(fmt.Sprintf(`apiVersion: klock/v1
agent: {id: paths-01}
workdir: %s
intents: ["CONSUMES FILE:${workdir}/**"]
declared_tools:
  - name: read_text_file
    blast_radius: read
    side_effects: READ
    input_schema:
      path: {type: path, within: ["${workdir}/data"]}
  - name: write_file
    blast_radius: local
    side_effects: REVERSIBLE-WRITE
    rollback: {mechanism: restore from the backup}
    idempotency: {mode: key, key_source: hash(path)}
    autonomy: {unsupervised_if: 'path.startsWith("%s/data/src/")', else: DENY}
    input_schema:
      path: {type: path, within: [%s/data]}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`, root, root, root)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	return root, p
}

// TestPathWithin: a type path argument is checked where the tool will take
// it, not as written: docs/gateway.md's ^/srv/data/ pattern let every one of the
// escapes below through.
func TestPathWithin(t *testing.T) {
	root, p := pathTree(t)
	d := root + "/data"
	tests := []struct {
		path   string
		reason string // "" allowed
	}{
		{d + "/hello.txt", ""},
		{d, ""},
		{d + "/", ""},
		{d + "/sub/../hello.txt", ""},
		{d + "//hello.txt", ""},
		{d + "/./hello.txt", ""},
		{d + "/in/x", ""},             // a link that stays inside
		{d + "/new/dir/file.txt", ""}, // to be created: its existing parent decides
		{d + "/in/../hello.txt", ""},  // kernel: sub/.. = data; lexical: data/hello.txt
		{d + "/../outside/secret.txt", "path_outside"},
		{d + "/sub/../../outside/secret.txt", "path_outside"},
		{d + "/..", "path_outside"},
		{d + "/sub/..//../outside", "path_outside"},
		{d + "/./../outside", "path_outside"},
		{d + "/out/secret.txt", "path_outside"},
		{d + "/out", "path_outside"},
		{d + "/abs/secret.txt", "path_outside"},
		{d + "/up/outside/secret.txt", "path_outside"},
		{d + "/deep", "path_outside"},
		{d + "/up/../x", "path_outside"},       // lexically data/x; the kernel climbs from root
		{d + "/out/../x", "path_outside"},      // lexically data/x; the kernel: root/x
		{d + "/inner/../../x", "path_outside"}, // the kernel: data/x; a tool that cleans first: root/x
		{d + "/out/new.txt", "path_outside"},   // to be created, through a link that leaves
		{d + "/missing/../../outside/x", "path_outside"},
		{d + "x/y", "path_outside"}, // a sibling that shares the prefix
		{root + "/outside/secret.txt", "path_outside"},
		{d + "/loop/x", "path_unresolvable"},
		{"data/hello.txt", "path_relative"},
		{"../etc/passwd", "path_relative"},
		{d + "/a\x00b", "path_invalid"},
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.path, root), func(t *testing.T) {
			dec := p.Decide(&Call{Tool: "read_text_file", Args: map[string]any{"path": tt.path}})
			if tt.reason == "" {
				if dec.Verdict != Allow {
					t.Fatalf("%q refused: %v", tt.path, dec.Err)
				}
				return
			}
			if dec.Verdict != Deny || dec.Err.Class != toolerr.InvalidArgs || dec.Err.Reason != tt.reason || dec.Check != "schema" {
				t.Fatalf("%q: verdict %v err %+v, want a tool_invalid_args %s refusal", tt.path, dec.Verdict, dec.Err, tt.reason)
			}
		})
	}
}

// TestPathCanonicalForAutonomyAndIdempotency: unsupervised_if and the
// idempotency key see where a path leads, so "src/../x" is not "src/" and
// "//x" is the same file as "/x".
func TestPathCanonicalForAutonomyAndIdempotency(t *testing.T) {
	root, p := pathTree(t)
	d := root + "/data"
	if dec := p.Decide(&Call{Tool: "write_file", Args: map[string]any{"path": d + "/src/main.go"}}); dec.Verdict != Allow {
		t.Fatalf("write in src/: %v %v", dec.Verdict, dec.Err)
	}
	for _, sneaky := range []string{d + "/src/../hello.txt", d + "/srclink/../hello.txt"} {
		dec := p.Decide(&Call{Tool: "write_file", Args: map[string]any{"path": sneaky}})
		if dec.Verdict != Deny || dec.Err.Reason != "autonomy_denied" {
			t.Fatalf("%s passed unsupervised_if startsWith(src/): %v %v", sneaky, dec.Verdict, dec.Err)
		}
	}
	a := p.Decide(&Call{Tool: "write_file", Args: map[string]any{"path": d + "/src/main.go"}})
	b := p.Decide(&Call{Tool: "write_file", Args: map[string]any{"path": d + "/src//./main.go"}})
	if a.IdemKey == "" || a.IdemKey != b.IdemKey {
		t.Fatalf("one file, two idempotency keys: %q %q", a.IdemKey, b.IdemKey)
	}
}

func TestPathSchemaValidation(t *testing.T) {
	doc := func(schema string) string {
		return `apiVersion: klock/v1
agent: {id: v-01}
intents: ["CONSUMES FILE:/srv/**"]
declared_tools:
  - name: t
    blast_radius: read
    side_effects: READ
    input_schema:
      path: ` + schema + `
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`
	}
	for schema, want := range map[string]string{
		`{type: path}`:                           "needs within",
		`{type: path, within: [srv/data]}`:       "relative",
		`{type: path, within: [/srv/../data]}`:   "not clean",
		`{type: path, within: ["${workdir}"]}`:   "no workdir",
		`{type: string, within: [/srv/data]}`:    "within on a string",
		`{type: path, within: [/srv/data]}`:      "",
		`{type: path, within: [/srv/data, /]}`:   "",
		`{type: string, pattern: "^/srv/data/"}`: "",
	} {
		_, err := policy.Parse("v.yaml", []byte(doc(schema)))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", schema, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want %q", schema, err, want)
		}
	}
}
