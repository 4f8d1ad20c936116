package check

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy"
)

// permPipeline: a tool whose type path argument is scoped to the workdir
// with a forbidden subtree reached also through a link, and a send tool
// without idempotency.
func permPipeline(t *testing.T) (string, *Pipeline) {
	t.Helper()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	os.MkdirAll(filepath.Join(root, "w", "keys"), 0o755)
	os.Symlink(filepath.Join(root, "w", "keys"), filepath.Join(root, "w", "k"))
	m, err := policy.Parse("perm.yaml", []byte(fmt.Sprintf(`apiVersion: klock/v1
agent: {id: perm-01}
workdir: %s/w
intents: ["CONSUMES FILE:${workdir}/**"]
declared_tools:
  - name: read
    blast_radius: read
    side_effects: READ
    permission: {forbidden: ["${workdir}/keys/**", "tags=*secret*"], scope: ["mode=r*"]}
    input_schema:
      path: {type: path, within: ["/"]}
      mode: {type: string, required: false}
      tags: {type: array, required: false}
  - {name: send, blast_radius: domain, side_effects: REVERSIBLE-WRITE, rollback: {mechanism: by hand}, autonomy: {unsupervised: always}}
hitl: {default_mode: HOTL}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`, root)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	return root, p
}

func TestPermissionScopeAndForbidden(t *testing.T) {
	root, p := permPipeline(t)
	w := root + "/w"
	for _, tc := range []struct {
		args   map[string]any
		reason string // "" allowed
	}{
		{map[string]any{"path": w + "/a.txt"}, ""},
		{map[string]any{"path": w + "/keys/id"}, "permission_forbidden"},
		{map[string]any{"path": w + "/k/id"}, "permission_forbidden"},         // through the link
		{map[string]any{"path": w + "/x/../keys/id"}, "permission_forbidden"}, // lexically
		{map[string]any{"path": w + "/a", "mode": "rw"}, ""},
		{map[string]any{"path": w + "/a", "mode": "w"}, "permission_scope"},
		{map[string]any{"path": w + "/a", "tags": []any{"x", map[string]any{"deep": "top-secret"}}}, "permission_forbidden"},
	} {
		d := p.Decide(&Call{Tool: "read", Args: tc.args})
		switch {
		case tc.reason == "" && d.Verdict != Allow:
			t.Errorf("%v: %v %v", tc.args, d.Verdict, d.Err)
		case tc.reason != "" && (d.Verdict != Deny || d.Err.Reason != tc.reason || d.Check != "permission" || !strings.Contains(d.Err.Message, "argument")):
			t.Errorf("%v: %v %+v, want %s", tc.args, d.Verdict, d.Err, tc.reason)
		}
	}
}

// A non-idempotent tool's repeat escalates; racing repeats are settled at
// dispatch, where only the first of two identical calls goes through.
func TestRetryOfANonIdempotentTool(t *testing.T) {
	_, p := permPipeline(t)
	call := func(to string) *Call { return &Call{Tool: "send", Args: map[string]any{"to": to}, RunID: "r"} }
	d1, d2 := p.Decide(call("ada")), p.Decide(call("ada"))
	if d1.Verdict != Allow || d2.Verdict != Allow || d1.RetryKey == "" || d1.RetryKey != d2.RetryKey {
		t.Fatalf("before any dispatch: %+v %+v", d1, d2)
	}
	if e := p.Dispatching(call("ada"), &d1, "call_1"); e != nil {
		t.Fatal(e)
	}
	if e := p.Dispatching(call("ada"), &d2, "call_2"); e == nil || e.Reason != "retry_refused" {
		t.Fatalf("the racing twin: %v", e)
	}
	d3 := p.Decide(call("ada"))
	if d3.Verdict != Escalate || d3.Check != "retry" || !d3.Retry || !strings.Contains(d3.Why, "call_1") {
		t.Fatalf("the repeat: %+v", d3)
	}
	if e := p.Dispatching(call("ada"), &d3, "call_3"); e != nil {
		t.Fatalf("the approved repeat: %v", e)
	}
	if d := p.Decide(call("bob")); d.Verdict != Allow {
		t.Fatalf("other arguments: %+v", d)
	}
	if d := p.Decide(&Call{Tool: "send", Args: map[string]any{"to": "ada"}, RunID: "r2"}); d.Verdict != Allow {
		t.Fatalf("another run: %+v", d)
	}
	p.NotDispatched(call("bob"), &d1, "call_1")
	if d := p.Decide(call("ada")); d.Verdict != Allow {
		t.Fatalf("after the first call proved undispatched: %+v", d)
	}
	if d := p.Decide(&Call{Tool: "read", Args: map[string]any{"path": "/x"}}); d.RetryKey != "" {
		t.Fatalf("a READ has no retry key: %+v", d)
	}
}

// In a confidential call the refusal names the argument and the entry,
// never the value (seed 004 §11: no plaintext in records).
func TestPermissionRefusalWithholdsConfidentialValues(t *testing.T) {
	root, p := permPipeline(t)
	WithConfidential()(p)
	d := p.Decide(&Call{Tool: "read", Args: map[string]any{"path": root + "/w/a", "mode": "w-secret-mode"}})
	if d.Verdict != Deny || d.Err.Reason != "permission_scope" || strings.Contains(d.Err.Message, "secret-mode") || !strings.Contains(d.Err.Message, `argument "mode"`) {
		t.Fatalf("%+v", d.Err)
	}
}
