package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

// A durable ledger with group commit signs its receipts in batches (one
// signature over a Merkle root); klock receipts verify checks each one's
// proof and the root's signature, a chain cut inside a batch still
// verifies (a receipt needs none of its batch-mates), a receipt changed
// after signing is refused, and a chain from before batch signing still
// verifies.
func TestReceiptsVerifyBatchSigned(t *testing.T) {
	dir := t.TempDir()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	chain := filepath.Join(dir, "receipts.jsonl")
	s, err := budget.Open(filepath.Join(dir, "ledger.db"), chain, priv, budget.WithGroupCommit(64))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k := budget.Key{Capability: "agent-batch", Grant: 0}
	if err := s.Define(ctx, budget.Grant{Key: k, Tool: "t", Limits: budget.Limits{Currency: "USD"}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				if _, err := s.Reserve(ctx, budget.Request{Key: k, Cost: money.Amount{Units: 1, Currency: "USD"}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "receipts", "verify", dir)
	if code != exitOK || !strings.Contains(out, "640 receipts") {
		t.Fatalf("verify: %d %s", code, out)
	}
	data, err := os.ReadFile(chain)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	// The middle of a batch of more than one receipt.
	mid := -1
	for i, l := range lines {
		r, err := receipt.Decode(bytes.TrimSuffix(l, []byte("\n")))
		if err != nil {
			t.Fatal(err)
		}
		if r.Proof == nil {
			t.Fatalf("receipt %d has no batch proof", i+1)
		}
		if r.Proof.Size > 2 && r.Proof.Index == r.Proof.Size/2 {
			mid = i
			break
		}
	}
	if mid < 0 {
		t.Fatal("no batch of more than two receipts in the chain")
	}
	cut := filepath.Join(t.TempDir(), "cut.jsonl")
	if err := os.WriteFile(cut, bytes.Join(lines[:mid+1], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "receipts", "verify", cut); code != exitOK {
		t.Fatalf("chain cut inside a batch: %d %s", code, out)
	}
	bad := bytes.Replace(lines[mid], []byte(`"ledger_debit":1`), []byte(`"ledger_debit":2`), 1)
	if bytes.Equal(bad, lines[mid]) {
		t.Fatal("nothing to tamper with")
	}
	if err := os.WriteFile(cut, bytes.Join(append(lines[:mid:mid], bad), nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, code, err := execute("receipts", "verify", cut); code != exitInvalid || err == nil || !strings.Contains(err.Error(), receipt.ErrProof.Error()) {
		t.Fatalf("tampered receipt: %d %v", code, err)
	}
	old := filepath.Join("..", "..", "guard", "receipt", "testdata", "klock-receipts-v1.jsonl")
	if out, code := run(t, "receipts", "verify", old); code != exitOK || !strings.Contains(out, "3 receipts") {
		t.Fatalf("single-signature chain: %d %s", code, out)
	}
}
