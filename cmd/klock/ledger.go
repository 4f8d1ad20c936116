package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/policy"
)

// receiptsDir is --receipts, else <workdir>/.klock/receipts.
func receiptsDir(m *policy.Manifest, manifestPath, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if m.Workdir == "" {
		return "", fmt.Errorf("%s has no workdir: pass --receipts DIR for the budget ledger and its receipts", manifestPath)
	}
	return filepath.Join(m.Workdir, ".klock", "receipts"), nil
}

// openLedger opens the budget ledger and receipt chain in dir (ledger.db,
// receipts.jsonl, signed with keyFile or receipts.key created on first use).
// One process owns a ledger at a time.
func openLedger(m *policy.Manifest, dir, keyFile string) (*budget.Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("receipts directory: %w", err)
	}
	priv, err := receiptKey(dir, keyFile)
	if err != nil {
		return nil, err
	}
	return budget.Open(filepath.Join(dir, "ledger.db"), filepath.Join(dir, "receipts.jsonl"), priv,
		budget.WithGroupCommit(256), budget.WithAgent(m.Agent.ID))
}

// closeLedger waits for the receipts to reach the chain, then closes.
func closeLedger(s *budget.Store) {
	_ = s.Flush(context.Background())
	s.Close()
}
