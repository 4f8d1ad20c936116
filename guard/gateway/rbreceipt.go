package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/klocklabs/klock/guard/receipt"
)

// ReceiptWriter records a receipt in the signed chain (budget.Store.Record).
type ReceiptWriter func(ctx context.Context, r *receipt.Receipt) error

// WithReceipts makes every rollback a signed receipt too (seed 002: the
// receipt records the compensation), beside its audit record.
func WithReceipts(w ReceiptWriter) Option { return func(g *Gateway) { g.receipts = w } }

// WithPolicyHash names the manifest in the receipts the gateway writes.
func WithPolicyHash(h string) Option { return func(g *Gateway) { g.policyHash = h } }

// receiptRollback writes one compensation's receipt: the compensating
// tool, its arguments (their keyed digest in confidential mode), allow when
// it ran, incomplete when the effect was not undone, and evidence naming
// the call it undoes and why.
func (g *Gateway) receiptRollback(ctx context.Context, run, reason string, p pending, res RollbackResult) {
	if g.receipts == nil {
		return
	}
	now := time.Now()
	r := &receipt.Receipt{CapabilityID: g.agent, AgentID: g.agent, ToolName: p.rollback, Phase: receipt.PhaseRollback,
		PolicyHash: g.policyHash, Time: now.UTC().Format(time.RFC3339Nano), Timestamp: now.Unix()}
	if r.ToolName == "" {
		r.ToolName = p.tool
	}
	var params any = p.args
	if g.confidential(p.rollback) {
		params = map[string]string{"args_hmac": g.hash.Digest(p.args), "confidential": "true"}
	}
	if raw, err := json.Marshal(params); err == nil && p.args != nil {
		r.Action.Parameters = raw
	}
	r.Decision = receipt.Decision{Verdict: receipt.Allow}
	if !res.OK {
		r.Decision = receipt.Decision{Verdict: receipt.Incomplete, Reason: "not undone: " + res.Message, Guard: "rollback"}
	}
	r.Evidence = []receipt.Evidence{{GuardName: "rollback", Verdict: res.OK,
		Details: fmt.Sprintf("compensates call %s (%s) of run %s: %s", p.callID, p.tool, run, reason)}}
	if err := g.receipts(context.WithoutCancel(ctx), r); err != nil {
		slog.Error("receipt: rollback receipt not written", "call_id", p.callID, "err", err)
	}
}
