package gateway

import (
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/policy"
)

// TestGatewayEvents: a refund over the unsupervised limit asks a human
// (approval.asked), whose approval is approval.given; an undeclared tool
// is tool.denied. Each record is valid against the published schema and
// quotes no argument.
func TestGatewayEvents(t *testing.T) {
	_, f, _, _ := runtime.Caller(0)
	m, err := policy.Load(filepath.Join(filepath.Dir(f), "..", "..", "examples", "manifests", "refund-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	hub := eventlog.NewHub("test", 0)
	rd := hub.Subscribe(eventlog.Filter{}, true, 0)
	g, st, err := Open(m, Layout{Dir: t.TempDir(), Agent: m.Agent.ID}, "", nil, WithEvents(hub))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A human approves what waits.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			list, _ := st.Approvals.List(true)
			for _, r := range list {
				_, _ = st.Approvals.Decide(r.ID, true, "alice", "")
			}
		}
	}()
	big := refundCall()
	big.Args["amount_usd"] = 417.25
	big.Args["transaction_id"] = "t2"
	dispatch := func(context.Context) (Outcome, error) {
		return Outcome{Result: json.RawMessage(`{"refund_id":"rf_2"}`)}, nil
	}
	if _, te := g.CallWith(context.Background(), big, dispatch, transactions); te != nil {
		t.Fatalf("approved refund: %v", te)
	}
	if _, te := g.Call(context.Background(), &check.Call{Tool: "drop_database", RunID: "r", Args: map[string]any{"secret": "s3cr3t"}}, dispatch); te == nil {
		t.Fatal("an undeclared tool ran")
	}
	hub.Close()
	var kinds []eventlog.Kind
	for {
		r, err := rd.Next(context.Background())
		if err != nil {
			break
		}
		line, _ := json.Marshal(r)
		if err := eventlog.Validate(line); err != nil {
			t.Error(err)
		}
		if strings.Contains(string(line), "s3cr3t") || strings.Contains(string(line), "417.25") {
			t.Errorf("a record quotes an argument: %s", line)
		}
		if r.Agent != m.Agent.ID || r.Session != "r" {
			t.Errorf("agent/run %s", line)
		}
		if r.Kind == eventlog.KindApprovalGiven && r.Tool.Approver != "alice" {
			t.Errorf("approval given %s", line)
		}
		kinds = append(kinds, r.Kind)
	}
	want := []eventlog.Kind{eventlog.KindApprovalAsked, eventlog.KindApprovalGiven, eventlog.KindToolDenied}
	if len(kinds) != len(want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("kinds %v, want %v", kinds, want)
		}
	}
}
