package gateway

import (
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// refundManifest is examples/manifests/refund-agent.yaml.
func refundManifest(t *testing.T) *policy.Manifest {
	t.Helper()
	_, f, _, _ := runtime.Caller(0)
	m, err := policy.Load(filepath.Join(filepath.Dir(f), "..", "..", "examples", "manifests", "refund-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func refundGateway(t *testing.T) (*Gateway, *Stores) {
	t.Helper()
	m := refundManifest(t)
	dir := t.TempDir()
	g, st, err := Open(m, Layout{Dir: dir, Agent: m.Agent.ID}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return g, st
}

var ctx42 = map[string]any{"task": map[string]any{"customer_id": "c_42"}, "account": map[string]any{"tier": "smb"}}

func refundCall() *check.Call {
	return &check.Call{Tool: "issue_refund", Context: ctx42, RunID: "r",
		Args: map[string]any{"customer_id": "c_42", "transaction_id": "t1", "amount_usd": 20.0, "reason_code": "DUPLICATE"}}
}

func TestIdempotentReplayAndNoDispatchWithoutAudit(t *testing.T) {
	g, st := refundGateway(t)
	effects := 0
	dispatch := func(context.Context) (Outcome, error) {
		effects++
		return Outcome{Result: json.RawMessage(`{"refund_id":"rf_1"}`)}, nil
	}
	out, te := g.CallWith(context.Background(), refundCall(), dispatch, transactions)
	if te != nil || string(out.Result) != `{"refund_id":"rf_1"}` {
		t.Fatalf("first: %v %s", te, out.Result)
	}
	out, te = g.CallWith(context.Background(), refundCall(), dispatch, transactions)
	if te != nil || !out.Replayed || effects != 1 {
		t.Fatalf("retry: err %v replayed %v effects %d", te, out.Replayed, effects)
	}
	// The audit log becomes unwritable: no call may reach the tool.
	st.Audit.Close()
	c := refundCall()
	c.Args["transaction_id"] = "t2"
	_, te = g.CallWith(context.Background(), c, dispatch, transactions)
	if te == nil || te.Class != toolerr.InternalError || te.Reason != "audit" || effects != 1 {
		t.Fatalf("unaudited call: %+v, effects %d", te, effects)
	}
}

func TestTimeoutIsTypedAndNotRetryableForNonIdempotent(t *testing.T) {
	g, _ := refundGateway(t)
	slow := func(ctx context.Context) (Outcome, error) { <-ctx.Done(); return Outcome{}, ctx.Err() }
	// draft_email: category B (3 s); natural idempotency: retryable.
	c := &check.Call{Tool: "draft_email", Args: map[string]any{"customer_id": "c_42", "body": "x"}, Context: ctx42}
	_, te := g.Call(context.Background(), c, slow)
	if te == nil || te.Class != toolerr.Timeout || !te.Retryable {
		t.Fatalf("timeout: %+v", te)
	}
}

// transactions answers get_transactions, issue_refund's must_belong_to
// lookup: customer c_42 owns t1 and t2.
func transactions(_ context.Context, c *check.Call) (Outcome, error) {
	if c.Tool != "get_transactions" || c.Args["customer_id"] != "c_42" {
		return Outcome{Result: json.RawMessage(`{"transactions":[]}`), Structured: json.RawMessage(`{"transactions":[]}`)}, nil
	}
	doc := json.RawMessage(`{"transactions":[{"transaction_id":"t1","amount":20},{"transaction_id":"t2","amount":5}]}`)
	return Outcome{Result: doc, Structured: doc}, nil
}
