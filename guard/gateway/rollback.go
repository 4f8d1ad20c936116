package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// Seed 002: a REVERSIBLE-WRITE has "a paired compensation, and the system
// knows how to run it" (the saga pattern). When a strict session is killed
// its files are restored by klock, but what its tool calls did to the
// world is not: the gateway keeps, per run, each successful REVERSIBLE-
// WRITE call's compensation (its contract's rollback.mechanism read as a
// call, "void_refund(refund_id)", the arguments taken from the call's
// result, else from its arguments) and runs them, newest first, when told
// the run's session was killed (Rollback). Each is audited as a "rollback"
// record naming the call it undoes.
//
// The compensations are journaled beside the audit log (rbjournal.go), so a
// gateway restarted between the call and the kill still runs them, through
// the invoker its proxy gives it (SetInvoker). Each rollback is audited
// and, when the gateway has a receipt writer (WithReceipts), receipted.

// pending is one call's compensation, not run yet.
type pending struct {
	callID, tool string // the call that made the effect
	rollback     string // the compensating tool
	args         map[string]any
	invoke       Invoker
	problem      string // non-empty: it cannot be run, and why
	// window is the contract's rollback.window; deadline, when it names a
	// duration, is when the compensation stops working (zero: no clock).
	// expired: the deadline passed before the compensation ran, so it
	// never will (seed 002: it works "within a known window").
	window   string
	deadline time.Time
	expired  bool
}

// expiredWhy says why p's effect can no longer be undone.
func (p pending) expiredWhy() string {
	return fmt.Sprintf("call %s (%s) is past its rollback window (%s, ended %s): %s no longer undoes it; undo it by hand",
		p.callID, p.tool, p.window, p.deadline.UTC().Format(time.RFC3339), p.rollback)
}

// rollbacks holds the pending compensations by run.
type rollbacks struct {
	mu       sync.Mutex
	run      map[string][]pending
	journal  *rbJournal
	fallback Invoker // reaches the tools for compensations restored from the journal
}

// SetInvoker gives the gateway a way to reach the tools for compensations
// registered before a restart (their calls' proxy is gone). The proxy that
// serves the gateway sets it when it starts.
func (g *Gateway) SetInvoker(inv Invoker) {
	g.rb.mu.Lock()
	g.rb.fallback = inv
	g.rb.mu.Unlock()
}

// Pending lists the compensations run's calls left, oldest first.
func (g *Gateway) Pending(run string) []RollbackResult {
	g.expire(run)
	g.rb.mu.Lock()
	defer g.rb.mu.Unlock()
	var out []RollbackResult
	for _, p := range g.rb.run[run] {
		r := RollbackResult{CallID: p.callID, Tool: p.tool, Rollback: p.rollback, OK: p.problem == "" && !p.expired, Message: p.problem, Expired: p.expired}
		if p.expired {
			r.Message = p.expiredWhy()
		}
		out = append(out, r)
	}
	return out
}

// expire marks run's compensations whose window has passed: each is
// journaled and audited as expired once, and the pipeline decides the
// tool's later calls in the run as an IRREVERSIBLE-WRITE's. The gateway
// runs it before deciding a call of run, listing run's compensations and
// rolling run back, so nothing is decided on a window that has passed.
func (g *Gateway) expire(run string) {
	now := g.now()
	g.rb.mu.Lock()
	var gone []pending
	for i, p := range g.rb.run[run] {
		if !p.expired && !p.deadline.IsZero() && !now.Before(p.deadline) {
			g.rb.run[run][i].expired = true
			gone = append(gone, g.rb.run[run][i])
		}
	}
	j := g.rb.journal
	g.rb.mu.Unlock()
	for _, p := range gone {
		g.p.Irreversible(p.tool, run, p.expiredWhy())
		if err := j.append(rbRecord{Op: rbExpired, Run: run, CallID: p.callID}, now); err != nil {
			slog.Error("rollback journal: an expiry was not journaled; a restart will find it again", "call_id", p.callID, "err", err)
		}
		rec := &audit.Record{Event: audit.EventRollback, Actor: g.agent, RunID: run, Tool: p.tool, CallID: newCallID(), Rollback: p.callID,
			Result: "expired", Reason: "window_passed", Message: p.expiredWhy()}
		if err := g.audit.Append(rec); err != nil {
			slog.Error("audit: rollback expiry not recorded", "call_id", p.callID, "err", err)
		}
	}
}

// registerRollback notes a successful call's compensation when its tool is
// a REVERSIBLE-WRITE.
func (g *Gateway) registerRollback(call *check.Call, callID string, t *policy.Tool, structured json.RawMessage, invoke Invoker) {
	if t == nil || t.SideEffects != policy.SideEffectReversibleWrite {
		return
	}
	p := pending{callID: callID, tool: call.Tool, invoke: invoke, window: t.Rollback.Window}
	now := g.now()
	if d, ok, _ := t.Rollback.Duration(); ok {
		p.deadline = now.Add(d)
	}
	name, argNames, ok := t.Rollback.RollbackCall()
	switch {
	case !ok:
		p.problem = fmt.Sprintf("rollback.mechanism %q names no tool: undo it by hand", t.Rollback.Mechanism)
	case !g.p.Declared(name):
		p.problem = fmt.Sprintf("rollback.mechanism names %s, which is not a declared (enabled) tool: declare it to have klock run it", name)
	case invoke == nil:
		p.problem = "this gateway has no way to reach " + name
	}
	p.rollback = name
	if p.problem == "" {
		out, _ := decodeStructured(structured)
		res, _ := out.(map[string]any)
		p.args = map[string]any{}
		for _, a := range argNames {
			if v, ok := res[a]; ok {
				p.args[a] = v
			} else if v, ok := call.Args[a]; ok {
				p.args[a] = v
			} else {
				p.problem = fmt.Sprintf("%s needs %s, which neither the call's result nor its arguments hold", name, a)
			}
		}
	}
	g.rb.mu.Lock()
	if g.rb.run == nil {
		g.rb.run = map[string][]pending{}
	}
	g.rb.run[call.RunID] = append(g.rb.run[call.RunID], p)
	j := g.rb.journal
	g.rb.mu.Unlock()
	rec := rbRecord{Op: rbAdd, Run: call.RunID, CallID: callID, Tool: p.tool, Rollback: p.rollback, Args: p.args, Problem: p.problem, Window: p.window}
	if !p.deadline.IsZero() {
		rec.Deadline = p.deadline.UTC().Format(time.RFC3339Nano)
	}
	if err := j.append(rec, now); err != nil {
		// The call ran; its compensation is kept in memory and a restart
		// would lose it. Say so where an operator looks.
		slog.Error("rollback journal: a compensation was not journaled; a gateway restart would lose it", "call_id", callID, "tool", call.Tool, "err", err)
	}
}

// RollbackResult is one compensation's outcome.
type RollbackResult struct {
	CallID   string `json:"call_id"` // the call undone
	Tool     string `json:"tool"`
	Rollback string `json:"rollback"`
	OK       bool   `json:"ok"`
	Message  string `json:"message,omitempty"`
	// Expired: not run because the call is past its rollback window (the
	// compensation would no longer undo it); OK is false.
	Expired bool `json:"expired,omitempty"`
}

// ErrRollback: at least one compensation could not be run or failed.
var ErrRollback = errors.New("rollback incomplete")

// ErrRollbackExpired, wrapped with ErrRollback, says some of the calls
// were past their rollback window and so were not compensated.
var ErrRollbackExpired = errors.New("past the rollback window")

// Rollback runs the compensations of run's REVERSIBLE-WRITE calls, newest
// first, because its session was killed (reason). A compensation is the
// contract's own reviewed mechanism, so it is not held to autonomy or
// rate limits (a kill must not wait for a human or a bucket); it runs with
// its tool's timeout and is audited. One whose call is past its rollback
// window is not run (it would no longer undo the effect): it is reported
// Expired. It returns every outcome, and ErrRollback (wrapped, naming the
// calls; with ErrRollbackExpired when any had expired) when any could not
// be undone.
func (g *Gateway) Rollback(ctx context.Context, run, reason string) ([]RollbackResult, error) {
	g.expire(run)
	g.rb.mu.Lock()
	list := g.rb.run[run]
	delete(g.rb.run, run)
	fallback, j := g.rb.fallback, g.rb.journal
	g.rb.mu.Unlock()
	var out []RollbackResult
	var failed []string
	expired := false
	for i := len(list) - 1; i >= 0; i-- {
		p := list[i]
		// The window is read again as each runs: the ones before may
		// have taken their tools' whole timeouts.
		p.expired = p.expired || !p.deadline.IsZero() && !g.now().Before(p.deadline)
		if p.invoke == nil && p.problem == "" && !p.expired {
			if p.invoke = fallback; p.invoke == nil {
				p.problem = "this gateway has no way to reach " + p.rollback + " (restored from the journal; its proxy has not started)"
			}
		}
		res := g.rollbackOne(ctx, run, reason, p)
		if !res.OK {
			failed = append(failed, p.callID+" ("+p.tool+")")
			expired = expired || res.Expired
		}
		// Done is journaled whatever the outcome: a compensation that
		// failed is reported (audit, receipt, ErrRollback) for a human, not
		// retried blindly by the next kill.
		if err := j.append(rbRecord{Op: rbDone, Run: run, CallID: p.callID}, g.now()); err != nil {
			slog.Error("rollback journal: completion not journaled; a restart would offer this compensation again", "call_id", p.callID, "err", err)
		}
		out = append(out, res)
	}
	switch {
	case expired:
		return out, fmt.Errorf("%w: run %s: %d call(s) not undone, some %w: %v (see the audit log's rollback records)", ErrRollback, run, len(failed), ErrRollbackExpired, failed)
	case len(failed) > 0:
		return out, fmt.Errorf("%w: run %s: %d call(s) not undone: %v (see the audit log's rollback records)", ErrRollback, run, len(failed), failed)
	}
	return out, nil
}

// rollbackOne runs (or, expired or unrunnable, reports) one compensation,
// audits and receipts it.
func (g *Gateway) rollbackOne(ctx context.Context, run, reason string, p pending) RollbackResult {
	res := RollbackResult{CallID: p.callID, Tool: p.tool, Rollback: p.rollback, OK: p.problem == "" && !p.expired, Expired: p.expired}
	start := time.Now()
	switch {
	case p.expired:
		res.Message = p.expiredWhy()
	case p.problem != "":
		res.Message = p.problem
	default:
		res.OK, res.Message = g.runRollback(ctx, run, p)
	}
	rec := &audit.Record{Event: audit.EventRollback, Actor: g.agent, RunID: run, Tool: p.rollback, CallID: newCallID(), Rollback: p.callID,
		Reason: "session_killed", DurationMS: ms(time.Since(start)), Message: reason}
	rec.Result = "ok"
	switch {
	case p.expired:
		rec.Result, rec.Message = "expired", reason+": "+res.Message
	case !res.OK:
		rec.Result, rec.Message = "not_undone", reason+": "+res.Message
	}
	rec.SetArgs(p.args, g.confidential(p.rollback), g.hash)
	if err := g.audit.Append(rec); err != nil {
		slog.Error("audit: rollback record not written", "call_id", p.callID, "err", err)
	}
	g.receiptRollback(ctx, run, reason, p, res)
	return res
}

func (g *Gateway) runRollback(ctx context.Context, run string, p pending) (bool, string) {
	timeout := check.DefaultTimeout
	if t, ok := g.p.Tool(p.rollback); ok {
		if to, _, ok := check.CategoryDefaults(t.Category); ok {
			timeout = to
		}
		if t.TimeoutMS > 0 {
			timeout = time.Duration(t.TimeoutMS) * time.Millisecond
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := p.invoke(ctx, &check.Call{Tool: p.rollback, Args: p.args, RunID: run})
	switch {
	case err != nil:
		return false, toolerr.From(err).Message
	case out.ToolError:
		return false, p.rollback + " reported an error: " + string(out.Result)
	}
	return true, ""
}

func (g *Gateway) confidential(tool string) bool {
	t, ok := g.p.Tool(tool)
	return g.p.Confidential() || ok && t.AuditLogging.Confidential
}
