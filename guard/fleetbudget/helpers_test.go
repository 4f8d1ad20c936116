package fleetbudget

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

var ctx = context.Background()

const prefix = "/klock-test"

func u(v uint64) *uint64 { return &v }

func usd(v uint64) money.Amount { return money.Amount{Units: v, Currency: "USD"} }

// host is one host's ledger directory, store and fleet ledger.
type host struct {
	name, dir string
	priv      ed25519.PrivateKey
	store     *budget.Store
	led       *Ledger
}

func newHost(t testing.TB, name, dir string) *host {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	h := &host{name: name, dir: dir}
	keyFile := filepath.Join(dir, "key")
	if b, err := os.ReadFile(keyFile); err == nil {
		h.priv = ed25519.PrivateKey(b)
	} else {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		h.priv = priv
		if err := os.WriteFile(keyFile, priv, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// open opens the host's store and its fleet ledger over cli.
func (h *host) open(t testing.TB, cli *clientv3.Client, opts ...Option) {
	t.Helper()
	s, err := budget.Open(filepath.Join(h.dir, "ledger.db"), filepath.Join(h.dir, "receipts.jsonl"), h.priv, budget.WithGroupCommit(256), budget.WithAgent(h.name))
	if err != nil {
		t.Fatal(err)
	}
	h.store = s
	h.led = New(s, cli, prefix, h.name, opts...)
}

// close returns the host's block, then closes its store.
func (h *host) close(t testing.TB) {
	t.Helper()
	if err := h.led.Close(); err != nil {
		t.Errorf("%s: close the fleet ledger: %v", h.name, err)
	}
	if err := h.store.Flush(ctx); err != nil {
		t.Error(err)
	}
	if err := h.store.Close(); err != nil {
		t.Error(err)
	}
}

// tally verifies the host's chain and adds its receipts to t.
func (h *host) tally(tb testing.TB, t Tally) {
	tb.Helper()
	pub := h.priv.Public().(ed25519.PublicKey)
	if _, err := receipt.VerifyFile(filepath.Join(h.dir, "receipts.jsonl"), pub, func(r *receipt.Receipt) error { t.Add(r); return nil }); err != nil {
		tb.Errorf("%s: receipts: %v", h.name, err)
	}
}

// waitFor polls cond (a fault's effect, not a timing assertion).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
