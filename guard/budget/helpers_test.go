package budget

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

var ctx = context.Background()

func u(v uint64) *uint64 { return &v }

func usd(v uint64) money.Amount { return money.Amount{Units: v, Currency: "USD"} }

type fixture struct {
	dir, db, chain string
	priv           ed25519.PrivateKey
	pub            ed25519.PublicKey
}

func newFixture(t testing.TB) *fixture {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d := t.TempDir()
	return &fixture{dir: d, db: filepath.Join(d, "ledger.db"), chain: filepath.Join(d, "receipts.jsonl"), priv: priv, pub: pub}
}

func (f *fixture) open(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s, err := Open(f.db, f.chain, f.priv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ledgerFromReceipts verifies the chain and sums, per grant, the ledger
// movement its receipts record.
func (f *fixture) ledgerFromReceipts(t testing.TB) (map[Key]int64, map[Key]int64, uint64) {
	t.Helper()
	charged, inv := map[Key]int64{}, map[Key]int64{}
	s, err := receipt.VerifyFile(f.chain, f.pub, func(r *receipt.Receipt) error {
		if fin := r.Metadata.Financial; fin != nil {
			k := Key{r.CapabilityID, fin.GrantIndex}
			charged[k] += int64(fin.LedgerDebit) - int64(fin.LedgerCredit)
			inv[k] += int64(fin.InvocationDelta)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("receipt chain: %v", err)
	}
	return charged, inv, s.Receipts
}
