package budget

import (
	"errors"
	"os"
	"testing"
	"time"
)

// When the ledger cannot be synced, no caller is told its decision was
// made before it is durable, and nothing more is decided once the failure
// is known (it is sticky until the ledger is reopened). The WAL is removed
// under the open ledger, so its sync really fails.
//
// One transaction per call syncs the WAL before answering: the next call
// is refused. With group commit the journal is what answers wait for; the
// WAL's failure surfaces at the applier's next sync (within applyEvery),
// after which every call is refused, and the decisions answered before
// that are in the ledger when it is reopened (replayed from the journal).
func TestUnsyncableLedgerFailsClosed(t *testing.T) {
	for _, opts := range [][]Option{{WithGroupCommit(16)}, nil} {
		f := newFixture(t)
		s := f.open(t, opts...)
		g := Grant{Key: Key{"fc", 0}, Tool: "t", Limits: Limits{Currency: "USD"}}
		if err := s.Define(ctx, g); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)}); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(f.db + "-wal"); err != nil {
			t.Fatal(err)
		}
		answered := 1
		deadline := time.Now().Add(10 * time.Second)
		for refused := 0; refused < 3; {
			h, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)})
			switch {
			case err == nil && opts != nil && refused == 0 && time.Now().Before(deadline):
				answered++ // durable in the journal; the applier has not synced yet
			case errors.Is(err, ErrLedger):
				refused++
			default:
				t.Fatalf("group %v, after the WAL went (%d answered, %d refused): hold %+v, error %v; want ErrLedger", opts != nil, answered, refused, h, err)
			}
		}
		s.Close()
		r := f.open(t)
		use, err := r.Usage(ctx, g.Key)
		r.Close()
		// Every answered decision is there. So may be the one whose sync
		// failed: refused, but what reached the disk was unknown.
		if err != nil || use.Invocations < uint64(answered) || use.Invocations > uint64(answered)+1 {
			t.Fatalf("group %v: reopened ledger %+v (%v), want the %d answered decisions", opts != nil, use, err, answered)
		}
		t.Logf("group %v: %d answered before the failure surfaced", opts != nil, answered)
	}
}

// With group commit SQLite's automatic checkpoints are off and the applier
// checkpoints every checkpointEvery decisions itself: the database file,
// not only the WAL, holds the decisions while the Store is open (without
// the applier's checkpoints it would grow only at Close), and a ledger
// reopened after many checkpoints holds every decision.
func TestApplierCheckpoints(t *testing.T) {
	f := newFixture(t)
	s := f.open(t, WithGroupCommit(64))
	g := Grant{Key: Key{"ckpt", 0}, Tool: "t", Limits: Limits{Currency: "USD"}}
	if err := s.Define(ctx, g); err != nil {
		t.Fatal(err)
	}
	const n = 20 * checkpointEvery
	for i := 0; i < n; i++ {
		if _, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Usage(ctx, g.Key); err != nil { // waits for the applier
		t.Fatal(err)
	}
	st, err := os.Stat(f.db)
	if err != nil {
		t.Fatal(err)
	}
	// A decision's receipt row alone is well over 300 bytes; the last
	// checkpointEvery may still be in the WAL only.
	if want := int64(n-checkpointEvery) * 300; st.Size() < want {
		t.Fatalf("the database file is %d bytes after %d decisions, want at least %d: not checkpointed", st.Size(), n, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := f.open(t)
	defer r.Close()
	if use, err := r.Usage(ctx, g.Key); err != nil || use.Invocations != n || use.OpenHolds != n {
		t.Fatalf("reopened: %+v %v, want %d invocations and open holds", use, err, n)
	}
}
