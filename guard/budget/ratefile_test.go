package budget

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy/money"
)

// Rates come from a configured source whose evidence (each
// rate's source and time, the file's hash) reaches the receipt.
func TestRatesFileEvidenceReachesTheReceipt(t *testing.T) {
	rates, err := LoadRates("testdata/rates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if rates.Len() != 2 || rates.FileSHA256 == "" {
		t.Fatalf("table %+v", rates)
	}
	f := newFixture(t)
	s := f.open(t, WithRates(rates))
	defer s.Close()
	g := Grant{Key: Key{"c", 0}, Tool: "t", Limits: Limits{Currency: "USD", Total: u(100000)}}
	s.Define(ctx, g)
	// 10 EUR at 1.08 = 1080 cents.
	h, err := s.Reserve(ctx, Request{Key: g.Key, Cost: money.Amount{Units: 1000, Currency: "EUR"}, PolicyHash: "sha256:abc"})
	if err != nil || h.Reserved != usd(1080) {
		t.Fatalf("reserve: %+v %v", h, err)
	}
	ev := h.Receipt.Metadata.Financial.OracleEvidence
	if ev == nil || ev.OracleSource != "ECB reference rate" || ev.RateTimestamp != 1795616100 || ev.RateNumerator != 108 {
		t.Fatalf("oracle evidence %+v", ev)
	}
	if len(h.Receipt.Evidence) != 2 || h.Receipt.Evidence[0].GuardName != EvidenceRate || h.Receipt.Evidence[1].GuardName != "budget" ||
		!strings.Contains(h.Receipt.Evidence[0].Details, rates.FileSHA256) || h.Receipt.PolicyHash != "sha256:abc" {
		t.Fatalf("receipt evidence %+v policy %q", h.Receipt.Evidence, h.Receipt.PolicyHash)
	}
	// A reconcile in USDC: 0.9998 read exactly, its own source recorded.
	st, err := s.Reconcile(ctx, h.ID, Settle{Actual: money.Amount{Units: 1_000_000, Currency: "USDC"}, ContentHash: "sha256:def"})
	if err != nil {
		t.Fatal(err)
	}
	fin := st.Receipt.Metadata.Financial
	if fin.OracleEvidence.OracleSource != "treasury desk quote" || fin.OracleEvidence.RateNumerator != 9998 || st.Receipt.ContentHash != "sha256:def" {
		t.Fatalf("reconcile receipt %+v %+v", fin.OracleEvidence, st.Receipt)
	}
	// 1 USDC * 0.9998 * 1.005 = 100.4799 cents, rounded up.
	if st.Charged != usd(101) {
		t.Fatalf("charged %v", st.Charged)
	}
}

func TestRatesFileRefusesRatesWithoutEvidence(t *testing.T) {
	for name, body := range map[string]string{
		"no source":    `rates: [{from: EUR, to: USD, rate: "1.08", at: "2026-11-25T12:00:00Z"}]`,
		"no time":      `rates: [{from: EUR, to: USD, rate: "1.08", source: ECB}]`,
		"float text":   `rates: [{from: EUR, to: USD, rate: "1e3", source: ECB, at: "2026-11-25T12:00:00Z"}]`,
		"zero":         `rates: [{from: EUR, to: USD, rate: "0", source: ECB, at: "2026-11-25T12:00:00Z"}]`,
		"both forms":   `rates: [{from: EUR, to: USD, rate: "1", numerator: 1, denominator: 1, source: ECB, at: "2026-11-25T12:00:00Z"}]`,
		"unknown key":  `rates: [{from: EUR, to: USD, rate: "1", price: 2, source: ECB, at: "2026-11-25T12:00:00Z"}]`,
		"unknown code": `rates: [{from: XXX1, to: USD, rate: "1", source: ECB, at: "2026-11-25T12:00:00Z"}]`,
		"empty":        `rates: []`,
	} {
		p := filepath.Join(t.TempDir(), "r.yaml")
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := LoadRates(p); !errors.Is(err, ErrRatesFile) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
