package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/guard/approval"
	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/idem"
	"github.com/klocklabs/klock/guard/toolerr"
)

// deferredState keeps the counters in memory and fails Sync on demand.
type deferredState struct {
	saves, syncs int
	syncErr      error
}

func (s *deferredState) Load() (map[string]check.ToolState, error) { return nil, nil }
func (s *deferredState) SaveUse(string, check.Use) error           { s.saves++; return nil }
func (s *deferredState) SaveGovernance(string, check.Governance) error {
	return nil
}
func (s *deferredState) Sync() error { s.syncs++; return s.syncErr }

// TestCountersDurableBeforeDispatch: with a state whose saves are made
// durable by Sync (ratestate's), the gateway syncs before every dispatch,
// and a call whose count cannot be made durable never reaches its tool.
func TestCountersDurableBeforeDispatch(t *testing.T) {
	m := refundManifest(t)
	st := &deferredState{}
	p, err := check.New(m, check.WithState(st))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ap, err := approval.Open(filepath.Join(dir, "approvals"))
	if err != nil {
		t.Fatal(err)
	}
	is, err := idem.Open(filepath.Join(dir, "idem.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(m, p, a, ap, is)
	if err != nil {
		t.Fatal(err)
	}
	effects := 0
	dispatch := func(context.Context) (Outcome, error) {
		if st.syncs < st.saves {
			t.Errorf("dispatched after %d saves and %d syncs", st.saves, st.syncs)
		}
		effects++
		return Outcome{Result: json.RawMessage(`{"account_id":"a"}`)}, nil
	}
	call := func() *check.Call {
		return &check.Call{Tool: "get_account", Context: ctx42, RunID: "r", Args: map[string]any{"customer_id": "c_42"}}
	}
	if _, te := g.CallWith(context.Background(), call(), dispatch, transactions); te != nil || effects != 1 || st.saves == 0 {
		t.Fatalf("first call: %v, %d effects, %d saves", te, effects, st.saves)
	}
	st.syncErr = errors.New("disk full")
	_, te := g.CallWith(context.Background(), call(), dispatch, transactions)
	if te == nil || te.Class != toolerr.InternalError || te.Reason != "rate_state" || effects != 1 {
		t.Fatalf("a call whose count cannot be kept: %+v, %d effects", te, effects)
	}
}
