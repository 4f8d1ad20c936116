package meter

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/tokenguard"
	"github.com/klocklabs/klock/policy"
)

// jsonAPI answers chat completions with a JSON body reporting out output
// tokens, after delay (or when the proxy gives up).
type jsonAPI struct {
	mu     sync.Mutex
	out    int
	delay  time.Duration
	maxOut []float64
}

func (a *jsonAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	a.mu.Lock()
	m, ok := body["max_tokens"].(float64)
	if !ok {
		m, _ = body["max_completion_tokens"].(float64)
	}
	a.maxOut = append(a.maxOut, m)
	a.mu.Unlock()
	select {
	case <-time.After(a.delay):
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}`, a.out, 10+a.out)
}

func runProxy(t *testing.T, api *jsonAPI, env policy.CostEnvelope) string {
	t.Helper()
	upstream := httptest.NewServer(api)
	t.Cleanup(upstream.Close)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	store, err := budget.Open(filepath.Join(dir, "ledger.db"), filepath.Join(dir, "receipts.jsonl"), priv, budget.WithAgent("run-agent"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := budget.Key{Capability: "s", Grant: 0}
	total := uint64(1_000_000)
	if err := store.Define(context.Background(), budget.Grant{Key: key, Tool: "model", Limits: budget.Limits{Currency: "USD", Total: &total}}); err != nil {
		t.Fatal(err)
	}
	g, _ := tokenguard.New(&env, tokenguard.WithEscalationThreshold(10000))
	u, _ := url.Parse(upstream.URL)
	px, err := New(Config{Upstream: u, Budget: store, Key: key, Guard: g, AgentID: "run-agent",
		Prices: &Prices{Currency: "USD", Models: map[string]Price{"gpt-test": {Input: 1, Output: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(px)
	t.Cleanup(s.Close)
	return s.URL
}

func chat(t *testing.T, base, run string, maxTokens int) (int, map[string]any) {
	t.Helper()
	limit := ""
	if maxTokens > 0 {
		limit = fmt.Sprintf(`"max_tokens":%d,`, maxTokens)
	}
	body := `{"model":"gpt-test",` + limit + `"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if run != "" {
		req.Header.Set(RunHeader, run)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestLatencyLimitCancelsTheCall: a call still running at the envelope's
// max_latency_ms is cancelled there and the agent gets a typed timeout,
// not a response whenever the API gets round to it.
func TestLatencyLimitCancelsTheCall(t *testing.T) {
	api := &jsonAPI{out: 5, delay: 5 * time.Second}
	base := runProxy(t, api, policy.CostEnvelope{MaxTokensIn: 100000, MaxTokensOut: 1000, ExpectedTokensOut: 5, MaxLatencyMS: 300})
	start := time.Now()
	status, out := chat(t, base, "", 50)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("the call ran %s past a 300 ms max_latency_ms", el)
	}
	if status != http.StatusGatewayTimeout || out["error_class"] != "timeout" || !strings.Contains(fmt.Sprint(out["message"]), "max_latency_ms") {
		t.Fatalf("%d %v", status, out)
	}
}

// TestEnvelopeHeldPerInvocation: the calls of one agent invocation (one
// run id) share one envelope: the second (asking no limit) gets only what the first left
// of max_tokens_out, the third none; another invocation starts afresh.
func TestEnvelopeHeldPerInvocation(t *testing.T) {
	api := &jsonAPI{out: 60}
	base := runProxy(t, api, policy.CostEnvelope{MaxTokensIn: 100000, MaxTokensOut: 100, ExpectedTokensOut: 5, MaxLatencyMS: 60000})
	if s, out := chat(t, base, "ar_1", 80); s != 200 {
		t.Fatalf("first call: %d %v", s, out)
	}
	// Asking no limit, it is capped at what the invocation has left.
	if s, out := chat(t, base, "ar_1", 0); s != 200 {
		t.Fatalf("second call: %d %v", s, out)
	}
	if api.maxOut[1] != 40 {
		t.Fatalf("second call of the invocation capped at %v output tokens, want the 40 left", api.maxOut[1])
	}
	s, out := chat(t, base, "ar_1", 10)
	if s != http.StatusForbidden || out["error_class"] != "token_guard" {
		t.Fatalf("third call of a spent invocation: %d %v", s, out)
	}
	if s, out := chat(t, base, "ar_2", 80); s != 200 || api.maxOut[len(api.maxOut)-1] != 80 {
		t.Fatalf("another invocation: %d %v (cap %v)", s, out, api.maxOut)
	}
}
