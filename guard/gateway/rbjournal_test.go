package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy"
)

// A REVERSIBLE-WRITE's compensation survives a gateway
// restart (it is journaled beside the audit), runs through the invoker the
// new gateway's proxy provides, and each rollback is a receipt as well as
// an audit record.
func TestCompensationsSurviveARestartAndAreReceipted(t *testing.T) {
	m, err := policy.Parse("contract.yaml", []byte(strings.Replace(contractManifest, ", CONFIDENTIAL", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := Layout{Dir: dir, Agent: m.Agent.ID}
	g, st, err := Open(m, l, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	noInvoke := func(context.Context, *check.Call) (Outcome, error) {
		t.Fatal("the old proxy's invoker was used")
		return Outcome{}, nil
	}
	if _, te := g.CallWith(context.Background(), &check.Call{Tool: "issue_refund", Args: map[string]any{"amount_usd": 5.0}, RunID: "r1"},
		answer(`{"refund_id":"rf_7"}`), noInvoke); te != nil {
		t.Fatal(te)
	}
	st.Close() // the gateway stops; its memory is gone

	var recs []*receipt.Receipt
	g2, st2, err := Open(m, l, "", nil, WithReceipts(func(_ context.Context, r *receipt.Receipt) error { recs = append(recs, r); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	var undone []string
	g2.SetInvoker(func(_ context.Context, c *check.Call) (Outcome, error) {
		undone = append(undone, c.Tool+":"+c.Args["refund_id"].(string))
		return Outcome{Result: json.RawMessage(`{"voided":true}`)}, nil
	})
	if p := g2.Pending("r1"); len(p) != 1 {
		t.Fatalf("pending after restart: %+v", p)
	}
	res, err := g2.Rollback(context.Background(), "r1", "session s1 killed: violation")
	if err != nil || len(res) != 1 || !res[0].OK || strings.Join(undone, ",") != "void_refund:rf_7" {
		t.Fatalf("rollback after restart: %v %+v (undone %v)", err, res, undone)
	}
	if len(recs) != 1 || recs[0].Phase != receipt.PhaseRollback || recs[0].ToolName != "void_refund" ||
		recs[0].Decision.Verdict != receipt.Allow || len(recs[0].Evidence) != 1 || !strings.Contains(recs[0].Evidence[0].Details, res[0].CallID) {
		t.Fatalf("rollback receipts: %+v", recs)
	}
	// Done is durable too: a third gateway has nothing left to undo.
	st2.Close()
	g3, st3, err := Open(m, l, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st3.Close()
	if p := g3.Pending("r1"); len(p) != 0 {
		t.Fatalf("a compensated call is pending again: %+v", p)
	}
}
