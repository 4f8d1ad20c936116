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
	g.rb.mu.Lock()
	defer g.rb.mu.Unlock()
	var out []RollbackResult
	for _, p := range g.rb.run[run] {
		out = append(out, RollbackResult{CallID: p.callID, Tool: p.tool, Rollback: p.rollback, OK: p.problem == "", Message: p.problem})
	}
	return out
}

// registerRollback notes a successful call's compensation when its tool is
// a REVERSIBLE-WRITE.
func (g *Gateway) registerRollback(call *check.Call, callID string, t *policy.Tool, structured json.RawMessage, invoke Invoker) {
	if t == nil || t.SideEffects != policy.SideEffectReversibleWrite {
		return
	}
	p := pending{callID: callID, tool: call.Tool, invoke: invoke}
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
	if err := j.append(rbRecord{Op: rbAdd, Run: call.RunID, CallID: callID, Tool: p.tool, Rollback: p.rollback, Args: p.args, Problem: p.problem}); err != nil {
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
}

// ErrRollback: at least one compensation could not be run or failed.
var ErrRollback = errors.New("rollback incomplete")

// Rollback runs the compensations of run's REVERSIBLE-WRITE calls, newest
// first, because its session was killed (reason). A compensation is the
// contract's own reviewed mechanism, so it is not held to autonomy or
// rate limits (a kill must not wait for a human or a bucket); it runs with
// its tool's timeout and is audited. It returns every outcome, and
// ErrRollback (wrapped, naming the calls) when any could not be undone.
func (g *Gateway) Rollback(ctx context.Context, run, reason string) ([]RollbackResult, error) {
	g.rb.mu.Lock()
	list := g.rb.run[run]
	delete(g.rb.run, run)
	fallback, j := g.rb.fallback, g.rb.journal
	g.rb.mu.Unlock()
	var out []RollbackResult
	var failed []string
	for i := len(list) - 1; i >= 0; i-- {
		p := list[i]
		if p.invoke == nil && p.problem == "" {
			if p.invoke = fallback; p.invoke == nil {
				p.problem = "this gateway has no way to reach " + p.rollback + " (restored from the journal; its proxy has not started)"
			}
		}
		res := RollbackResult{CallID: p.callID, Tool: p.tool, Rollback: p.rollback, OK: p.problem == ""}
		start := time.Now()
		if p.problem != "" {
			res.Message = p.problem
		} else {
			res.OK, res.Message = g.runRollback(ctx, run, p)
		}
		rec := &audit.Record{Event: audit.EventRollback, Actor: g.agent, RunID: run, Tool: p.rollback, CallID: newCallID(), Rollback: p.callID,
			Reason: "session_killed", DurationMS: ms(time.Since(start)), Message: reason}
		rec.Result = "ok"
		if !res.OK {
			rec.Result, rec.Message = "not_undone", reason+": "+res.Message
			failed = append(failed, p.callID+" ("+p.tool+")")
		}
		rec.SetArgs(p.args, g.confidential(p.rollback), g.hash)
		if err := g.audit.Append(rec); err != nil {
			slog.Error("audit: rollback record not written", "call_id", p.callID, "err", err)
		}
		g.receiptRollback(ctx, run, reason, p, res)
		// Done is journaled whatever the outcome: a compensation that
		// failed is reported (audit, receipt, ErrRollback) for a human, not
		// retried blindly by the next kill.
		if err := j.append(rbRecord{Op: rbDone, Run: run, CallID: p.callID}); err != nil {
			slog.Error("rollback journal: completion not journaled; a restart would offer this compensation again", "call_id", p.callID, "err", err)
		}
		out = append(out, res)
	}
	if len(failed) > 0 {
		return out, fmt.Errorf("%w: run %s: %d call(s) not undone: %v (see the audit log's rollback records)", ErrRollback, run, len(failed), failed)
	}
	return out, nil
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
