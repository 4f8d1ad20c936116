package toolproxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// fake provides draft_email only, and records what it was called with.
type fake struct{ calls []*check.Call }

func (f *fake) Provides(tool string) bool { return tool == "draft_email" }
func (f *fake) Invoke(_ context.Context, c *check.Call) (gateway.Outcome, error) {
	f.calls = append(f.calls, c)
	return gateway.Outcome{Result: json.RawMessage(`{"draft_id":"d1"}`), Usage: check.Usage{TokensUsed: 5}}, nil
}

func server(t *testing.T, opts ...Option) (*httptest.Server, *fake) {
	t.Helper()
	_, f, _, _ := runtime.Caller(0)
	m, err := policy.Load(filepath.Join(filepath.Dir(f), "..", "..", "examples", "manifests", "refund-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gw, st, err := gateway.Open(m, gateway.Layout{Dir: t.TempDir(), Agent: m.Agent.ID}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	fk := &fake{}
	s := httptest.NewServer(New(gw, fk, opts...))
	t.Cleanup(s.Close)
	return s, fk
}

func call(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+"/v1/tools/call", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func TestCallContextAndProviders(t *testing.T) {
	s, fk := server(t, WithContext(map[string]any{"task.customer_id": "c_42"}))
	// The request's context cannot override the operator's binding.
	st, out := call(t, s.URL, `{"tool":"draft_email","args":{"customer_id":"c_42","body":"hi"},"context":{"task.customer_id":"c_99","agent_run_id":"ar_7"}}`)
	if st != 200 || out["ok"] != true || out["tokens_used"] != float64(5) || out["cost"] != nil {
		t.Fatalf("draft_email: %d %v", st, out)
	}
	task, _ := fk.calls[0].Context["task"].(map[string]any)
	if len(fk.calls) != 1 || fk.calls[0].RunID == "ar_7" || fk.calls[0].Context["agent_run_id"] != fk.calls[0].RunID || task["customer_id"] != "c_42" {
		t.Fatalf("provider saw %+v", fk.calls)
	}
	// Neither spelling of the key lets the request rebind it.
	for _, ctx := range []string{`{"task.customer_id":"c_99"}`, `{"task":{"customer_id":"c_99"}}`} {
		st, out = call(t, s.URL, `{"tool":"draft_email","args":{"customer_id":"c_99","body":"hi"},"context":`+ctx+`}`)
		if st == 200 || out["error_class"] == "" || len(fk.calls) != 1 {
			t.Fatalf("binding from the request's context %s: %d %v", ctx, st, out)
		}
	}
	// Declared, but no provider: typed, and never dispatched.
	st, out = call(t, s.URL, `{"tool":"get_account","args":{"customer_id":"c_42"}}`)
	if st != 500 || out["error_class"] != string(toolerr.InternalError) || out["reason"] != "no_provider" {
		t.Fatalf("no provider: %d %v", st, out)
	}
	resp, _ := http.Get(s.URL + "/v1/tools")
	var list struct{ Tools []ToolInfo }
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Tools) != 1 || list.Tools[0].Name != "draft_email" {
		t.Fatalf("GET /v1/tools: %+v", list)
	}
}

func TestDecodeRequest(t *testing.T) {
	good := `{"tool":"t","args":{"a":1},"context":{"agent_run_id":"r"}}`
	if r, err := DecodeRequest(strings.NewReader(good)); err != nil || r.Tool != "t" || r.Args["a"] != float64(1) {
		t.Fatalf("good: %+v %v", r, err)
	}
	for _, bad := range []string{``, `null`, `[]`, `{"tool":""}`, `{"tool":"t","x":1}`, `{"tool":"t"} {}`, `{"tool":"t","args":"s"}`, "{\"tool\":\"\xff\"}",
		`{"tool":"` + strings.Repeat("a", 300) + `"}`} {
		if _, err := DecodeRequest(strings.NewReader(bad)); !errors.Is(err, ErrRequest) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := DecodeRequest(strings.NewReader(`{"tool":"t","args":{"b":"` + strings.Repeat("x", MaxRequest) + `"}}`)); !errors.Is(err, ErrRequest) {
		t.Errorf("oversized: %v", err)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{`{"tool":"t","args":{"a":1},"context":{"agent_run_id":"r"}}`, `{"tool":"t"}`, `{}`, `[`, `{"tool":"t","args":{"a":[1,{"b":null}]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(strings.NewReader(string(b)))
		if err != nil {
			if !errors.Is(err, ErrRequest) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if r.Tool == "" || r.Args == nil || r.Context == nil {
			t.Fatalf("accepted an incomplete request: %+v", r)
		}
		// What was accepted re-encodes and decodes to the same request.
		again, _ := json.Marshal(r)
		if len(again) > MaxRequest {
			return // escaping can grow a body past the limit
		}
		r2, err := DecodeRequest(strings.NewReader(string(again)))
		if err != nil || r2.Tool != r.Tool {
			t.Fatalf("re-decode of %s: %v", again, err)
		}
	})
}

// TestRunIsTheProxys: per_run was keyed by the run id
// the agent sent, so a new agent_run_id per call lifted it. The run is the
// proxy's.
func TestRunIsTheProxys(t *testing.T) {
	_, f, _, _ := runtime.Caller(0)
	m, err := policy.Load(filepath.Join(filepath.Dir(f), "..", "..", "examples", "manifests", "refund-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gw, gst, err := gateway.Open(m, gateway.Layout{Dir: t.TempDir(), Agent: m.Agent.ID}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gst.Close)
	if err := gw.Pipeline().Limit("draft_email", policy.RateLimits{PerRun: 2}); err != nil {
		t.Fatal(err)
	}
	fk := &fake{}
	s := httptest.NewServer(New(gw, fk, WithContext(map[string]any{"task.customer_id": "c_42"})))
	t.Cleanup(s.Close)
	for i, run := range []string{"ar_1", "ar_2"} {
		if st, out := call(t, s.URL, `{"tool":"draft_email","args":{"customer_id":"c_42","body":"hi"},"context":{"agent_run_id":"`+run+`"}}`); st != 200 {
			t.Fatalf("call %d: %d %v", i+1, st, out)
		}
	}
	st, out := call(t, s.URL, `{"tool":"draft_email","args":{"customer_id":"c_42","body":"hi"},"context":{"agent_run_id":"ar_3"}}`)
	if st != 403 || out["reason"] != "rate_per_run" || len(fk.calls) != 2 {
		t.Fatalf("third call under a fresh agent_run_id: %d %v, want rate_per_run", st, out)
	}
}
