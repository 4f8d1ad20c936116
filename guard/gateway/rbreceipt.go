package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/guard/toolerr"
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
	if p.args != nil {
		r.Action.Parameters = g.receiptParams(p.rollback, p.args)
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

// receiptParams is what a receipt holds of a call's arguments: them, or in
// confidential mode their keyed digest.
func (g *Gateway) receiptParams(tool string, args map[string]any) json.RawMessage {
	var params any = args
	if g.confidential(tool) {
		params = map[string]string{"args_hmac": g.hash.Digest(args), "confidential": "true"}
	}
	raw, _ := json.Marshal(params)
	return raw
}

// receiptRefusal writes the deny receipt of a call refused before its
// budget saw it (schema, rate, autonomy, approval, ownership, leases),
// carrying the evidence of every guard that decided, the refusing one's
// last. The budget writes its own refusals, and a call refused after its
// reservation is receipted by the reservation's reversal; a pending
// approval is not a refusal.
func (c *gatewayCall) receiptRefusal(e *toolerr.Error) {
	g := c.g
	if g.receipts == nil || e.Check == "budget" || c.res != nil || e.Reason == "approval_pending" {
		return
	}
	guard := e.Check
	switch {
	case e.ApprovalID != "" || strings.HasPrefix(e.Reason, "approval_"):
		guard = "approval" // the stage escalated; the human (or the queue) refused
	case guard == "":
		guard = "gateway"
	}
	ev := c.d.Evidence
	if n := len(ev); n == 0 || ev[n-1].Verdict {
		ev = append(ev, check.Evidence{GuardName: guard, Verdict: false, Details: "refused: " + string(e.Class) + " (" + e.Reason + ")"})
	}
	now := g.now()
	r := &receipt.Receipt{CapabilityID: g.agent, AgentID: g.agent, ToolName: c.call.Tool, Phase: receipt.PhaseGuard, PolicyHash: g.policyHash,
		Time: now.UTC().Format(time.RFC3339Nano), Timestamp: now.Unix(), Evidence: ev,
		Decision: receipt.Decision{Verdict: receipt.Deny, Guard: guard, Reason: string(e.Class) + ": " + e.Reason}}
	r.Action.Parameters = g.receiptParams(c.call.Tool, c.call.Args)
	if err := g.receipts(context.WithoutCancel(c.ctx), r); err != nil {
		slog.Error("receipt: refusal receipt not written", "call_id", c.callID, "err", err)
	}
}
