package budget

import (
	"bytes"
	"os"
	"testing"
)

// The chain is synced lazily because a tail lost with the page cache is
// re-emitted from the ledger on Open. That is only sound if the re-emitted
// receipts are the lost ones, byte for byte: same seq, same prev, same
// signature (ed25519 is deterministic).
func TestLostChainTailComesBackByteForByte(t *testing.T) {
	f := newFixture(t)
	s := f.open(t, WithGroupCommit(16))
	g := Grant{Key: Key{"tail", 0}, Tool: "t", Limits: Limits{Currency: "USD", Total: u(50)}}
	if err := s.Define(ctx, g); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60; i++ { // the last ones are denied: denials come back too
		h, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)})
		if err == nil && i%3 == 0 {
			if _, err := s.Reconcile(ctx, h.ID, Settle{Actual: usd(0)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(f.chain)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(whole, []byte("\n"))
	for _, keep := range []int{len(lines) - 2, len(lines) / 2, 0} {
		cut := bytes.Join(lines[:keep], nil)
		if err := os.WriteFile(f.chain, cut, 0o600); err != nil {
			t.Fatal(err)
		}
		s := f.open(t)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		again, err := os.ReadFile(f.chain)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, whole) {
			t.Fatalf("chain cut to %d receipts and re-emitted differs from the original (%d vs %d bytes)", keep, len(again), len(whole))
		}
	}
}
