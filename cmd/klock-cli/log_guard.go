package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/klocklabs/klock/enforcer/report"
	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/internal/hashchain"
)

// guardRecords reads the gateway's audit log and receipts (either may be
// empty) for one run, each file's chain verified first: a report does not
// show records that were altered. Nil when neither file was given.
func guardRecords(auditPath, receiptsPath, run string) (*report.Guard, error) {
	if auditPath == "" && receiptsPath == "" {
		return nil, nil
	}
	g := &report.Guard{Run: run}
	if auditPath != "" {
		if st, err := os.Stat(auditPath); err == nil && st.IsDir() {
			auditPath = filepath.Join(auditPath, "audit.jsonl")
		}
		calls, err := auditCalls(auditPath, run)
		if err != nil {
			return nil, err
		}
		g.Calls, g.Sources = calls, append(g.Sources, auditPath)
	}
	if receiptsPath != "" {
		spend, err := receiptSpend(receiptsPath, run)
		if err != nil {
			return nil, err
		}
		g.Spend, g.Sources = spend, append(g.Sources, receiptsPath)
	}
	return g, nil
}

// auditCalls folds the run's audit records into one row per call: the
// dispatch or decision gives its verdict, the result its outcome.
func auditCalls(path, run string) ([]report.GuardCall, error) {
	var calls []report.GuardCall
	byID := map[string]int{}
	_, err := hashchain.VerifyFile(path, func(_ uint64, line []byte) error {
		var r audit.Record
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		if r.RunID != run {
			return nil
		}
		if i, ok := byID[r.CallID]; ok && r.Event == audit.EventResult {
			calls[i].Result, calls[i].DurationMS = r.Result, r.DurationMS
			return nil
		}
		t, _ := time.Parse(time.RFC3339Nano, r.Time)
		c := report.GuardCall{Time: t, Tool: r.Tool, Verdict: r.Verdict, Result: r.Result, Check: r.Check, Reason: r.Reason}
		if r.Event == audit.EventRollback {
			c.Verdict, c.Reason = "rollback", "compensates call "+r.Rollback
		}
		byID[r.CallID] = len(calls)
		calls = append(calls, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	return calls, nil
}

// receiptSpend is what the run's receipts charged; a receipt without a
// run (no cost record) cannot be told to be this session's, and is left.
func receiptSpend(path, run string) ([]report.Spend, error) {
	var spend []report.Spend
	_, err := receipt.VerifyFile(path, nil, func(r *receipt.Receipt) error {
		c, f := r.Metadata.Cost, r.Metadata.Financial
		if c == nil || c.RunID != run || f == nil {
			return nil
		}
		t, _ := time.Parse(time.RFC3339Nano, r.Time)
		spend = append(spend, report.Spend{Time: t, Tool: r.ToolName, Verdict: r.Decision.Verdict, Kind: c.CallKind(),
			Charged: uint64(f.CostCharged), Currency: f.Currency})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("receipts %s: %w", path, err)
	}
	return spend, nil
}
