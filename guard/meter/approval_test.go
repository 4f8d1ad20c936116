package meter

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/approval"
	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/guard/tokenguard"
	"github.com/klocklabs/klock/policy"
)

// nearBody asks for 1,700 output tokens: over 80 % of the envelope's 2,000,
// so the Token Guard escalates it to the approval queue.
const nearBody = `{"model":"gpt-test","stream":true,"max_completion_tokens":1700,"messages":[{"role":"user","content":"a long answer, please"}]}`

type approvalEnv struct {
	proxy *httptest.Server
	up    *fakeOpenAI
	queue *approval.Store
	chain string
	pub   ed25519.PublicKey
	store *budget.Store
}

func setupApproval(t *testing.T, timeout, wait time.Duration) *approvalEnv {
	t.Helper()
	up := &fakeOpenAI{chunks: []int{3}}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	chain := filepath.Join(dir, "receipts.jsonl")
	store, err := budget.Open(filepath.Join(dir, "ledger.db"), chain, priv, budget.WithAgent("chat-agent"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := budget.Key{Capability: "session-1"}
	total := uint64(10000)
	if err := store.Define(context.Background(), budget.Grant{Key: key, Tool: "model", Limits: budget.Limits{Currency: "USD", Total: &total}}); err != nil {
		t.Fatal(err)
	}
	queue, err := approval.Open(filepath.Join(dir, "approvals"), approval.WithPoll(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := tokenguard.New(&policy.CostEnvelope{MaxTokensIn: 12000, MaxTokensOut: 2000, ExpectedTokensOut: 5})
	u, _ := url.Parse(upstream.URL)
	px, err := New(Config{Upstream: u, Budget: store, Key: key, Guard: g, AgentID: "chat-agent",
		Prices: &Prices{Currency: "USD", Models: map[string]Price{"gpt-test": {Input: 1, Output: 1}}}},
		WithApprover(&approval.CostApprover{Store: queue, Agent: "chat-agent", Timeout: timeout, Wait: wait}))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(px)
	t.Cleanup(proxy.Close)
	return &approvalEnv{proxy: proxy, up: up, queue: queue, chain: chain, pub: pub, store: store}
}

type answer struct {
	status int
	body   string
}

func (e *approvalEnv) post() <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		resp, err := http.Post(e.proxy.URL+"/v1/chat/completions", "application/json", bytes.NewReader([]byte(nearBody)))
		if err != nil {
			ch <- answer{0, err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- answer{resp.StatusCode, string(b)}
	}()
	return ch
}

// pending waits for the escalation to reach the queue, as klock approvals
// would show it.
func (e *approvalEnv) pending(t *testing.T) *approval.Request {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		l, err := e.queue.List(true)
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 1 {
			return l[0]
		}
	}
	t.Fatal("no pending approval")
	return nil
}

func typed(t *testing.T, a answer) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.ErrorClass == "" || e.OK {
		t.Fatalf("not a typed error (%d): %s", a.status, a.body)
	}
	return e
}

func TestEscalationApprovedProceeds(t *testing.T) {
	e := setupApproval(t, time.Minute, 0)
	ch := e.post()
	r := e.pending(t)
	if r.Tool != "model:gpt-test" || !strings.Contains(r.Why, "max_tokens_out") || !strings.Contains(string(r.Args), "1700") {
		t.Fatalf("approval request: %+v", r)
	}
	select {
	case a := <-ch:
		t.Fatalf("answered before approval: %d %s", a.status, a.body)
	case <-time.After(100 * time.Millisecond):
	}
	if len(e.up.bodies) != 0 {
		t.Fatal("forwarded before approval")
	}
	if _, err := e.queue.Decide(r.ID, true, "alice", ""); err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.status != 200 || !strings.Contains(a.body, "[DONE]") || len(e.up.bodies) != 1 {
		t.Fatalf("approved call: %d %s (upstream saw %d)", a.status, a.body, len(e.up.bodies))
	}
	if got, _ := e.queue.Get(r.ID); !got.Used {
		t.Fatal("the approval was not consumed")
	}
}

func TestEscalationDeniedOrTimedOutIsTypedRefusal(t *testing.T) {
	e := setupApproval(t, time.Minute, 0)
	ch := e.post()
	r := e.pending(t)
	if _, err := e.queue.Decide(r.ID, false, "bob", "too long"); err != nil {
		t.Fatal(err)
	}
	a := <-ch
	te := typed(t, a)
	if a.status != http.StatusForbidden || te.ErrorClass != "approval_denied" || te.Retryable || !strings.Contains(te.Message, "too long") || !strings.Contains(te.Message, r.ID) {
		t.Fatalf("denied: %d %+v", a.status, te)
	}

	short := setupApproval(t, 300*time.Millisecond, 0)
	a = <-short.post()
	te = typed(t, a)
	if te.ErrorClass != "approval_timeout" || te.Retryable {
		t.Fatalf("timed out: %d %+v", a.status, te)
	}
	if len(e.up.bodies)+len(short.up.bodies) != 0 {
		t.Fatal("a refused call reached the upstream")
	}
	// The refusal is a signed receipt naming the class.
	if err := e.store.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var guards []string
	if _, err := receipt.VerifyFile(e.chain, e.pub, func(r *receipt.Receipt) error {
		guards = append(guards, r.Decision.Verdict+"/"+r.Decision.Guard)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(guards) != 1 || guards[0] != "deny/approval_denied" {
		t.Fatalf("receipts: %v", guards)
	}
}

func TestEscalationStillPendingIsRetryableAndWaitsOnTheSameRequest(t *testing.T) {
	e := setupApproval(t, time.Minute, 150*time.Millisecond)
	a := <-e.post()
	te := typed(t, a)
	if te.ErrorClass != "approval_pending" || !te.Retryable {
		t.Fatalf("pending: %+v", te)
	}
	first := e.pending(t)
	ch := e.post() // the client retries the same request
	time.Sleep(50 * time.Millisecond)
	if l, _ := e.queue.List(true); len(l) != 1 || l[0].ID != first.ID {
		t.Fatalf("the retry filed another request: %v", l)
	}
	e.queue.Decide(first.ID, true, "alice", "")
	if a := <-ch; a.status != 200 {
		t.Fatalf("approved retry: %d %s", a.status, a.body)
	}
}
