package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/klocklabs/klock/enforcer/fleet"
	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/charge"
	"github.com/klocklabs/klock/guard/fleetbudget"
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
// receipts.jsonl, signed with keyFile or receipts.key created on first use),
// converting other currencies with the rates file (ratesFlag, else the
// manifest's rates:), naming the manifest (policyHash) in every receipt.
// One process owns a ledger at a time.
func openLedger(m *policy.Manifest, dir, keyFile, ratesFlag, policyHash string) (*budget.Store, error) {
	opts := []budget.Option{budget.WithGroupCommit(256), budget.WithAgent(m.Agent.ID), budget.WithPolicyHash(policyHash)}
	rates, err := loadRates(m, ratesFlag)
	if err != nil {
		return nil, &exitError{code: exitInvalid, err: err}
	}
	if rates != nil {
		opts = append(opts, budget.WithRates(rates))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("receipts directory: %w", err)
	}
	priv, err := receiptKey(dir, keyFile)
	if err != nil {
		return nil, err
	}
	return budget.Open(filepath.Join(dir, "ledger.db"), filepath.Join(dir, "receipts.jsonl"), priv, opts...)
}

// loadRates reads the rate source: --rates, else the manifest's rates:
// (relative to the manifest's directory), else none (a charge in another
// currency than its grant's is then refused at the pre-charge).
func loadRates(m *policy.Manifest, flag string) (*budget.RateTable, error) {
	path := flag
	if path == "" && m.Rates != "" {
		path = m.Rates
		if !filepath.IsAbs(path) && m.File != "" {
			path = filepath.Join(filepath.Dir(m.File), path)
		}
	}
	if path == "" {
		return nil, nil
	}
	t, err := budget.LoadRates(path)
	if err != nil {
		return nil, fmt.Errorf("the rate source (--rates, or the manifest's rates:): %w", err)
	}
	return t, nil
}

// closeLedger waits for the receipts to reach the chain, then closes.
func closeLedger(s *budget.Store) {
	_ = s.Flush(context.Background())
	s.Close()
}

// fleetLedger is the ledger the charger uses: store itself, or, when
// this host is in a fleet (klockd's marker), store with its grants shared
// fleet-wide in blocks (guard/fleetbudget), this ledger being member
// host:dir. closeB returns the blocks, then closes the ledger.
func fleetLedger(store *budget.Store, dir string) (charge.Ledger, func(), error) {
	cfg, err := fleet.ReadMarker()
	if errors.Is(err, fleet.ErrNoFleet) {
		return store, func() { closeLedger(store) }, nil
	}
	if err != nil {
		return nil, nil, err
	}
	cli, cfg, err := fleet.Dial(cfg)
	if err != nil {
		return nil, nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	led := fleetbudget.New(store, cli, cfg.Prefix, cfg.Host+":"+abs)
	return led, func() {
		if err := led.Close(); err != nil {
			slog.Warn("klock: fleet budget: unused blocks stay this host's until it starts again", "err", err)
		}
		cli.Close()
		closeLedger(store)
	}, nil
}
