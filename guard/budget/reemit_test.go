package budget

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/klocklabs/klock/guard/receipt"
)

// leaves returns what each receipt of a chain file is signed over.
func leaves(t *testing.T, chain []byte) [][]byte {
	var out [][]byte
	for _, line := range bytes.Split(bytes.TrimSuffix(chain, []byte("\n")), []byte("\n")) {
		leaf, err := receipt.Linker(line)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, leaf)
	}
	return out
}

// The chain is synced lazily because a tail lost with the page cache is
// re-emitted from the ledger on Open. That is only sound if the re-emitted
// receipts are the lost ones: byte for byte what their signature covers
// (the Merkle leaf of a batch-signed receipt: every member but proof and
// signature, seq and prev included), so the chain's links are unchanged.
// Only how they are signed may differ: a batch cut by the crash is signed
// again in other batches.
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
		if a, b := leaves(t, again), leaves(t, whole); !slices.EqualFunc(a, b, bytes.Equal) {
			t.Fatalf("chain cut to %d receipts and re-emitted differs from the original (%d vs %d receipts)", keep, len(a), len(b))
		}
		if _, err := receipt.VerifyFile(f.chain, nil, nil); err != nil {
			t.Fatalf("chain cut to %d receipts and re-emitted: %v", keep, err)
		}
	}
}
