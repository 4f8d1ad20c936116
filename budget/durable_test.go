package budget

import (
	"errors"
	"os"
	"testing"
)

// When the ledger cannot be synced, no caller is told its decision was
// made: the one waiting is refused with ErrLedger, and so is everything
// after (the failure is sticky until the ledger is reopened). The WAL is
// removed under the open ledger, so the sync really fails.
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
		for i := 0; i < 3; i++ {
			h, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)})
			if !errors.Is(err, ErrLedger) {
				t.Fatalf("group %v, call %d after the WAL went: hold %+v, error %v; want ErrLedger", opts != nil, i, h, err)
			}
		}
		s.Close()
	}
}
