package gateway

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/internal/hashchain"
	"github.com/klocklabs/klock/policy"
)

// TestRestartMergesCountersTheStoreLost: the counters' store does not
// flush before a dispatch; the dispatch record, flushed first, carries
// what the call left in them. A gateway whose store lost the call's
// count (its database as it was before the call: an unflushed commit
// lost in a power cut) merges it back from the audit log when it opens
// it: a per_day: 1 tool used before the crash stays used, and the
// counters are back in the store.
func TestRestartMergesCountersTheStoreLost(t *testing.T) {
	m := refundManifest(t)
	for i := range m.DeclaredTools {
		if m.DeclaredTools[i].Name == "get_account" {
			m.DeclaredTools[i].RateLimits = policy.RateLimits{PerDay: 1}
		}
	}
	l := Layout{Dir: t.TempDir(), Agent: m.Agent.ID}
	effects := 0
	dispatch := func(context.Context) (Outcome, error) {
		effects++
		return Outcome{Result: json.RawMessage(`{"account_id":"a"}`)}, nil
	}
	call := &check.Call{Tool: "get_account", Context: ctx42, RunID: "r", Args: map[string]any{"customer_id": "c_42"}}
	open := func() (*Gateway, *Stores) {
		t.Helper()
		g, st, err := Open(m, l, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		return g, st
	}

	g, st := open()
	st.Limits.Sync()
	before := snapshotFiles(t, l.Limits())
	if _, te := g.CallWith(context.Background(), call, dispatch, transactions); te != nil || effects != 1 {
		t.Fatalf("first call: %v, %d effects", te, effects)
	}
	st.Close()
	var rec *audit.Record
	if _, err := hashchain.VerifyFile(l.Audit(), func(_ uint64, line []byte) error {
		var r audit.Record
		if err := json.Unmarshal(line, &r); err == nil && r.Event == audit.EventDispatch {
			rec = &r
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rec == nil || rec.Counters == nil || rec.Counters.Calls != 1 || len(rec.Counters.Buckets) == 0 {
		t.Fatalf("the dispatch record carries no counters: %+v", rec)
	}

	restoreFiles(t, l.Limits(), before) // the store's commit of the call, lost
	g, st = open()
	_, te := g.CallWith(context.Background(), call, dispatch, transactions)
	if te == nil || te.Class != toolerr.Restricted || te.Check != "rate" || effects != 1 {
		t.Fatalf("after a crash that lost the store's count, a per_day: 1 tool's second call: %+v, %d effects; want rate_limited", te, effects)
	}
	st.Close()

	// The merge was written to the store: a restart with the audit log
	// gone still knows the call.
	os.Remove(l.Audit())
	g, st = open()
	defer st.Close()
	if _, te := g.CallWith(context.Background(), call, dispatch, transactions); te == nil || te.Class != toolerr.Restricted || te.Check != "rate" {
		t.Fatalf("the merged count was not kept in the store: %+v", te)
	}
}

// snapshotFiles reads db and its -wal and -shm files (absent ones nil).
func snapshotFiles(t *testing.T, db string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		b, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err == nil {
			out[filepath.Base(p)] = b
		}
	}
	return out
}

// restoreFiles puts back what snapshotFiles read, removing what it did
// not find.
func restoreFiles(t *testing.T, db string, files map[string][]byte) {
	t.Helper()
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		b, ok := files[filepath.Base(p)]
		if !ok {
			os.Remove(p)
			continue
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
