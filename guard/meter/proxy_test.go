package meter

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/guard/tokenguard"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/money"
)

// fakeOpenAI speaks OpenAI chat completions over SSE and, like a model that
// ignores its limit, streams chunks[i] content deltas on the i-th call.
type fakeOpenAI struct {
	mu     sync.Mutex
	bodies []map[string]any
	chunks []int
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	n := f.chunks[len(f.bodies)%len(f.chunks)]
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := 0; i < n; i++ {
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i)
		fl.Flush()
		select {
		case <-r.Context().Done():
			return // the proxy cut the stream
		case <-time.After(2 * time.Millisecond):
		}
	}
	fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", n, 40+n)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func setup(t *testing.T, chunks ...int) (*httptest.Server, *fakeOpenAI, *budget.Store, string, ed25519.PublicKey) {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		testutil.Unavailable(t, "curl is not installed (scripts/deps.sh build installs it)")
	}
	up := &fakeOpenAI{chunks: chunks}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	chain := filepath.Join(dir, "receipts.jsonl")
	store, err := budget.Open(filepath.Join(dir, "ledger.db"), chain, priv, budget.WithGroupCommit(16), budget.WithAgent("chat-agent"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := budget.Key{Capability: "session-1", Grant: 0}
	total := uint64(30)
	if err := store.Define(context.Background(), budget.Grant{Key: key, Tool: "model", Limits: budget.Limits{Currency: "USD", Total: &total}}); err != nil {
		t.Fatal(err)
	}
	g, _ := tokenguard.New(&policy.CostEnvelope{MaxTokensIn: 12000, MaxTokensOut: 2000, ExpectedTokensOut: 5,
		MaxCost: &policy.Money{Amount: money.Amount{Units: 20, Currency: "USD"}}})
	u, _ := url.Parse(upstream.URL)
	px, err := New(Config{Upstream: u, Budget: store, Key: key, Guard: g, AgentID: "chat-agent",
		Prices: &Prices{Currency: "USD", Models: map[string]Price{"gpt-test": {Input: 1000, Output: 10000}}}})
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(px)
	t.Cleanup(proxy.Close)
	_ = curl
	return proxy, up, store, chain, pub
}

// curlStream posts a streaming chat request with curl and returns stdout.
const streamBody = `{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"Say hello to the meter, please."}]}`

// wantCap is what 0.20 USD buys after the input estimate (a token per 4
// bytes at 0.1 cent): 1 cent per output token.
var wantCap = (200000 - int64((len(streamBody)+3)/4)*1000) / 10000

func curlStream(t *testing.T, base string) string {
	t.Helper()
	body := streamBody
	out, err := exec.Command("curl", "-sS", "-N", "--max-time", "20", "-H", "Content-Type: application/json",
		"-d", body, base+"/v1/chat/completions").CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	return string(out)
}

func TestCurlStreamsThroughTheMeterAndIsCutAtTheBudget(t *testing.T) {
	proxy, up, store, chain, pub := setup(t, 5, 40)
	ctx := context.Background()

	// 1. A stream within budget: relayed whole, metered from its usage.
	out := curlStream(t, proxy.URL)
	if strings.Count(out, `"delta":{"content":"tok`) != 5 || !strings.Contains(out, "[DONE]") {
		t.Fatalf("first stream not relayed whole:\n%s", out)
	}
	first := up.bodies[0]
	if first["max_completion_tokens"] != float64(wantCap) {
		t.Fatalf("output not capped to what 0.20 USD allows: %v", first["max_completion_tokens"])
	}
	if so, _ := first["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Fatalf("usage reporting not requested: %v", first["stream_options"])
	}
	use, _ := store.Usage(ctx, budget.Key{Capability: "session-1"})
	// 40 input tokens x 0.1 cent + 5 output x 1 cent = 9 cents.
	if use.Charged.Units != 9 || use.Invocations != 1 {
		t.Fatalf("after the first stream: %+v", use)
	}

	// 2. An upstream that ignores the cap: cut mid-stream at the budget.
	out = curlStream(t, proxy.URL)
	relayed := strings.Count(out, `"delta":{"content":"tok`)
	if relayed == 0 || int64(relayed) > wantCap || !strings.Contains(out, "klock_budget_exceeded") || strings.Contains(out, "[DONE]") {
		t.Fatalf("second stream not cut at the budget (%d chunks relayed):\n%s", relayed, out)
	}
	use, _ = store.Usage(ctx, budget.Key{Capability: "session-1"})
	if use.Charged.Units != 29 { // 9 + the full 20-cent reservation
		t.Fatalf("after the cut: %+v", use)
	}

	// 3. One cent left: refused before anything is sent upstream.
	resp, err := http.Post(proxy.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-test","messages":[{"role":"user","content":"more"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPaymentRequired || !strings.Contains(string(b), `"error_class":"budget_exhausted"`) || len(up.bodies) != 2 {
		t.Fatalf("exhausted budget: %d %s (upstream saw %d calls)", resp.StatusCode, b, len(up.bodies))
	}

	if err := store.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var settled []*receipt.Receipt
	var refusals int
	evidence := map[string]string{} // each phase's guards, in order
	if _, err := receipt.VerifyFile(chain, pub, func(r *receipt.Receipt) error {
		if r.Phase == receipt.PhaseReconcile {
			settled = append(settled, r)
		}
		if r.Phase == receipt.PhaseGuard && r.Decision.Verdict == receipt.Deny {
			refusals++
		}
		var g []string
		for _, e := range r.Evidence {
			g = append(g, e.GuardName+map[bool]string{true: "+", false: "-"}[e.Verdict])
		}
		evidence[r.Phase+" "+r.Decision.Verdict] = strings.Join(g, " ")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(settled) != 2 || refusals != 1 {
		t.Fatalf("%d reconcile receipts, %d refusals", len(settled), refusals)
	}
	// Model calls carry the Token Guard's and the output cap's verdicts.
	for k, want := range map[string]string{"pre-charge allow": "token-guard+ output-cap+ budget+", "reconcile allow": "token-guard+ output-cap+ cost-source-",
		"guard deny": "token-guard+ budget_exhausted-"} {
		if evidence[k] != want {
			t.Errorf("%s evidence: %q, want %q", k, evidence[k], want)
		}
	}
	a := settled[0].Metadata.Cost.Actual
	if a.Source != "api-usage" || a.TokensIn != 40 || a.TokensOut != 5 || *a.Cost != 9 {
		t.Fatalf("first actual %+v", a)
	}
	a = settled[1].Metadata.Cost.Actual
	if a.Source != "unavailable" || !strings.Contains(a.UnavailableReason, "cut") || a.Cost != nil {
		t.Fatalf("cut stream actual %+v", a)
	}
}
