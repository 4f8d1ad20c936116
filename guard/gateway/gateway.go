package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/klocklabs/klock/enforcer/lease"
	"log/slog"
	"strings"
	"time"

	"github.com/klocklabs/klock/guard/approval"
	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/idem"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// Outcome is what a dispatched tool returned.
type Outcome struct {
	// Result is the tool's result as it goes back to the agent (an MCP
	// CallToolResult, or a tool proxy's output).
	Result json.RawMessage
	// ToolError: the tool ran and reported a failure of its own (MCP
	// isError). Such a result is not stored for idempotent replay.
	ToolError bool
	Usage     check.Usage
	// Replayed: the result came from the idempotency store.
	Replayed bool
	// Charged is what the budget charged for this call (nil: no grant, or
	// a replay, which is not charged again).
	Charged *check.Charged
	// Structured is the tool's structured output as JSON (an MCP result's
	// structuredContent, or the JSON its text holds; a plugin's output),
	// empty when it gave none. The gateway holds it to the contract's
	// output_schema, reads must_belong_to lookups and rollback arguments
	// from it, and audits the values audit_logging.records names.
	Structured json.RawMessage
}

// Invoker dispatches a call the gateway makes on its own behalf: a
// must_belong_to lookup, a rollback. The proxy that owns the connection to
// the tools provides it (it knows how to reach a tool other than the one
// the agent called).
type Invoker func(ctx context.Context, call *check.Call) (Outcome, error)

// ErrNotDispatched, wrapped by a Dispatch's error, says the call never
// reached the tool (it could not be started): its budget reservation is
// released. Any other dispatch error keeps the reservation charged, because
// the gateway cannot know whether the tool acted.
var ErrNotDispatched = errors.New("the call was not dispatched")

// Dispatch sends the call to the tool. ctx carries the contract's deadline.
type Dispatch func(ctx context.Context) (Outcome, error)

// Gateway ties the pieces together. Build it with New.
type Gateway struct {
	p          *check.Pipeline
	audit      *audit.Log
	approvals  *approval.Store
	idem       *idem.Store
	charger    check.Charger
	agent      string
	timeout    time.Duration // approval deadline
	wait       time.Duration // how long one call blocks on a pending approval
	hash       *audit.Hasher // keyed digests of confidential values
	rb         rollbacks     // compensations of REVERSIBLE-WRITE calls, by run
	receipts   ReceiptWriter // rollbacks' receipts (nil: audit only)
	policyHash string
	leases     *leasing // WithLeases (nil: calls take no leases)
}

// Option configures New.
type Option func(*Gateway)

// WithCharger sets the budget seam (nil: no budget).
func WithCharger(c check.Charger) Option { return func(g *Gateway) { g.charger = c } }

// WithApprovalWait bounds how long one call blocks waiting for a human
// (default: the whole approval timeout). A call still pending then gets a
// retryable tool_restricted "approval_pending" result naming the request;
// retrying the same call waits on the same request.
func WithApprovalWait(d time.Duration) Option { return func(g *Gateway) { g.wait = d } }

// DefaultApprovalTimeout applies when the manifest sets no
// hitl.approval_timeout_seconds.
const DefaultApprovalTimeout = 5 * time.Minute

// New builds a gateway. audit, approvals and idem are required: a gateway
// that could not record, escalate or deduplicate must not start.
func New(m *policy.Manifest, p *check.Pipeline, a *audit.Log, ap *approval.Store, is *idem.Store, opts ...Option) (*Gateway, error) {
	if p == nil || a == nil || ap == nil || is == nil {
		return nil, errors.New("gateway: the pipeline, audit log, approval store and idempotency store are all required")
	}
	g := &Gateway{p: p, audit: a, approvals: ap, idem: is, agent: m.Agent.ID, timeout: DefaultApprovalTimeout, hash: a.Hasher()}
	if s := m.HITL.ApprovalTimeoutSeconds; s > 0 {
		g.timeout = time.Duration(s) * time.Second
	}
	for _, o := range opts {
		o(g)
	}
	if g.leases != nil {
		g.leases.setup(m)
	}
	if g.wait <= 0 || g.wait > g.timeout {
		g.wait = g.timeout
	}
	return g, nil
}

// Pipeline is the gateway's check pipeline (tools/list filtering, governance).
func (g *Gateway) Pipeline() *check.Pipeline { return g.p }

func newCallID() string {
	var b [8]byte
	rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// Call runs one call through the gateway, without a way to reach other
// tools: a call whose contract needs a lookup is refused.
func (g *Gateway) Call(ctx context.Context, call *check.Call, dispatch Dispatch) (Outcome, *toolerr.Error) {
	return g.CallWith(ctx, call, dispatch, nil)
}

// CallWith runs one call through the gateway; invoke reaches the tools the
// gateway calls itself (must_belong_to lookups now, the contract's rollback
// if the run is later killed). A nil invoke refuses calls that need one.
func (g *Gateway) CallWith(ctx context.Context, call *check.Call, dispatch Dispatch, invoke Invoker) (Outcome, *toolerr.Error) {
	start := time.Now()
	rec := func(event string) *audit.Record {
		return &audit.Record{Event: event, Actor: g.agent, RunID: call.RunID, Tool: call.Tool}
	}
	callID := newCallID()
	d := g.p.Decide(call)
	refuse := func(e *toolerr.Error, verdict string) (Outcome, *toolerr.Error) {
		r := rec("decision")
		r.CallID, r.Verdict, r.Result, r.Check, r.Reason, r.Message, r.ApprovalID = callID, verdict, string(e.Class), e.Check, e.Reason, e.Message, e.ApprovalID
		r.SetArgs(call.Args, d.Confidential, g.hash)
		r.DurationMS = ms(time.Since(start))
		if err := g.audit.Append(r); err != nil {
			// The refusal stands; the agent learns the audit failed too.
			e = toolerr.New(toolerr.InternalError, "audit", "%s (and the refusal could not be audited: %v)", e.Message, err)
		}
		return Outcome{}, e
	}
	if d.Verdict == check.Deny {
		return refuse(d.Err, "deny")
	}
	verdict := "allow"
	var approvalID string
	if d.Verdict == check.Escalate {
		req, e := g.escalate(ctx, call, &d)
		if e != nil {
			return refuse(e, "escalate")
		}
		verdict, approvalID = "approved", req.ID
		if d.Governance {
			g.p.Governed(call.Tool, call.RunID)
		}
	}
	// must_belong_to: each declared ownership is checked through its
	// lookup tool before anything is reserved or dispatched.
	if e := g.checkBelongs(ctx, call, d.Tool, invoke); e != nil {
		return refuse(e, "deny")
	}
	// Idempotency: one effect per key, whatever the retries.
	if d.IdemKey != "" {
		unlock := g.idem.Lock(d.IdemKey)
		defer unlock()
		if e, ok := g.idem.Get(d.IdemKey); ok {
			r := rec("decision")
			r.CallID, r.Verdict, r.Result, r.Check, r.IdemKey, r.ApprovalID = callID, "replay", "ok", "idempotency", d.IdemKey, approvalID
			r.SetArgs(call.Args, d.Confidential, g.hash)
			r.SetOutput(e.Result)
			if err := g.audit.Append(r); err != nil {
				return Outcome{}, auditErr(err)
			}
			if approvalID != "" {
				_ = g.approvals.MarkUsed(approvalID)
			}
			return Outcome{Result: e.Result, Replayed: true}, nil
		}
	}
	// Leases on what the tool touches, held until the call ends, however
	// it ends: taken before anything is reserved, so a refusal costs
	// nothing.
	if g.leases != nil {
		release, holder, e := g.leases.acquire(ctx, call, callID, d.Tool)
		if e != nil {
			return refuse(e, "deny")
		}
		defer release()
		if holder != (lease.Holder{}) {
			// A plugin run under klock for this call takes its leases as
			// the call's (session.Options.LeaseHolder).
			ctx = lease.ContextWithHolder(ctx, holder)
		}
	}
	var res check.Reservation
	if g.charger != nil {
		if d.Confidential {
			d.ArgsDigest = g.hash.Digest(call.Args)
		}
		var err error
		if res, err = g.charger.Reserve(ctx, call, &d); err != nil {
			e := toolerr.From(err)
			e.Check = "budget"
			return refuse(e, "deny")
		}
	}
	r := rec("dispatch")
	r.CallID, r.Verdict, r.Check, r.IdemKey, r.ApprovalID = callID, verdict, d.Check, d.IdemKey, approvalID
	r.SetArgs(call.Args, d.Confidential, g.hash)
	if err := g.audit.Append(r); err != nil {
		g.release(ctx, call, res, "the dispatch could not be audited")
		return Outcome{}, auditErr(err)
	}
	if approvalID != "" {
		if err := g.approvals.MarkUsed(approvalID); err != nil {
			g.release(ctx, call, res, "the approval could not be consumed")
			return Outcome{}, toolerr.New(toolerr.InternalError, "approval_store", "could not consume approval %s: %v", approvalID, err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, d.Timeout)
	out, err := dispatch(dctx)
	cancel()
	dur := time.Since(start)
	var te *toolerr.Error
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		te = toolerr.New(toolerr.Timeout, "deadline", "%s did not answer within %s", call.Tool, d.Timeout).WithRetry(idempotent(d.Tool))
	default:
		te = toolerr.From(err)
		if te.Class == toolerr.InternalError && te.Reason == "internal" {
			te.Reason = "dispatch"
		}
		// The gateway does not know whether the tool acted: a
		// non-idempotent tool must not be retried blindly.
		te.Retryable = te.Retryable && idempotent(d.Tool)
	}
	var chargeErr error
	if g.charger != nil && res != nil {
		switch {
		case te != nil && errors.Is(err, ErrNotDispatched):
			g.release(ctx, call, res, te.Message)
		case te != nil:
			u := check.Usage{Reason: fmt.Sprintf("the call ended with %s (%s): whether the tool acted is unknown, the reservation stays charged", te.Class, te.Message)}
			u.ContentHash = g.contentHash(call.Args, nil, d.Confidential)
			out.Charged, chargeErr = g.charger.Reconcile(context.WithoutCancel(ctx), res, u)
		default:
			if !out.Usage.Known && out.Usage.Reason == "" {
				out.Usage.Reason = call.Tool + " reported no cost; the reservation stays charged"
			}
			out.Usage.ContentHash = g.contentHash(call.Args, out.Result, d.Confidential)
			out.Charged, chargeErr = g.charger.Reconcile(context.WithoutCancel(ctx), res, out.Usage)
		}
		if chargeErr != nil {
			// The call ran; its hold stays open and charged in the ledger
			// (never fails open). Say so in the log and the audit.
			slog.Error("budget: reconcile failed; the reservation stays charged", "tool", call.Tool, "call_id", callID, "err", chargeErr)
		}
	}
	// The output contract: a result that breaks output_schema is the
	// tool's failure and is withheld from the agent (it ran, so its cost
	// above stands).
	if te == nil && !out.ToolError {
		te = g.checkOutput(call.Tool, out.Structured)
	}
	g.p.Outcome(call.Tool, call.RunID, te != nil || out.ToolError)
	if te == nil && !out.ToolError {
		g.registerRollback(call, callID, d.Tool, out.Structured, invoke)
	}
	if te == nil && d.IdemKey != "" && !out.ToolError {
		if err := g.idem.Put(d.IdemKey, call.Tool, out.Result); err != nil {
			// The effect happened; a retry could repeat it. Say so.
			te = toolerr.New(toolerr.InternalError, "idempotency_store", "%s ran, but its result could not be stored for replay (%v): do not retry", call.Tool, err)
		}
	}
	r = rec("result")
	r.CallID, r.DurationMS, r.IdemKey, r.ApprovalID = callID, ms(dur), d.IdemKey, approvalID
	switch {
	case te != nil:
		r.Result, r.Reason, r.Message = string(te.Class), te.Reason, te.Message
	case out.ToolError:
		r.Result = "tool_error"
	default:
		r.Result = "ok"
	}
	if chargeErr != nil {
		r.Message = strings.TrimPrefix(r.Message+"; ", "; ") + "budget reconcile failed: " + chargeErr.Error()
	}
	r.SetOutput(out.Result)
	if te == nil && !out.ToolError {
		g.recordValues(r, &d, call.Args, out.Structured)
	}
	if err := g.audit.Append(r); err != nil {
		// The call ran and its dispatch is on record; the agent gets its
		// result, and the next call's dispatch record will be refused if
		// the log stays unwritable.
		slog.Error("audit: result record not written", "tool", call.Tool, "call_id", callID, "err", err)
	}
	if te != nil {
		return Outcome{}, te
	}
	return out, nil
}

// release reverses a reservation whose call did not reach the tool.
func (g *Gateway) release(ctx context.Context, call *check.Call, res check.Reservation, reason string) {
	if g.charger == nil || res == nil {
		return
	}
	if err := g.charger.Release(context.WithoutCancel(ctx), res, reason); err != nil {
		// The hold stays charged: pessimistic, never in the agent's favour.
		slog.Error("budget: release failed; the reservation stays charged", "tool", call.Tool, "err", err)
	}
}

func auditErr(err error) *toolerr.Error {
	return toolerr.New(toolerr.InternalError, "audit",
		"refused: the call cannot be audited (%v); fix the audit log's file system or path and retry", err).WithRetry(true)
}

// idempotent: safe to call again with the same arguments.
func idempotent(t *policy.Tool) bool {
	if t == nil {
		return false
	}
	return t.SideEffects == policy.SideEffectRead || t.Idempotency.Mode == "natural" || t.Idempotency.Mode == "key"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// escalate files (or finds) the approval request for call and waits for a
// decision, at most the approval wait.
func (g *Gateway) escalate(ctx context.Context, call *check.Call, d *check.Decision) (*approval.Request, *toolerr.Error) {
	args, _ := json.Marshal(call.Args)
	req := approval.Request{
		Agent: g.agent, RunID: call.RunID, Tool: call.Tool, Why: d.Why,
		ArgsSHA256:  g.hash.Digest(call.Args),
		Fingerprint: g.hash.Digest([]any{call.Tool, call.Args, call.RunID}),
	}
	if !d.Confidential {
		req.Args = args
	}
	r, err := g.approvals.Submit(req, g.timeout)
	if err != nil {
		return nil, toolerr.New(toolerr.InternalError, "approval_store", "%s needs approval (%s) and the approval queue failed: %v", call.Tool, d.Why, err)
	}
	r, err = g.approvals.Wait(ctx, r.ID, g.wait)
	if err != nil {
		return nil, toolerr.New(toolerr.InternalError, "approval_store", "waiting for approval %s: %v", r.ID, err)
	}
	var e *toolerr.Error
	switch r.State {
	case approval.Approved:
		return r, nil
	case approval.Pending:
		e = toolerr.New(toolerr.Restricted, "approval_pending",
			"%s waits for human approval %s (%s); approve with `klock approve %s`; retry this same call to wait again (deadline %s)",
			call.Tool, r.ID, d.Why, r.ID, r.Deadline.UTC().Format(time.RFC3339)).WithRetry(true)
	case approval.Expired:
		e = toolerr.New(toolerr.Restricted, "approval_timeout", "%s was not approved before the deadline (approval %s): denied", call.Tool, r.ID)
	default:
		msg := fmt.Sprintf("%s was denied by %s (approval %s)", call.Tool, r.DecidedBy, r.ID)
		if r.Note != "" {
			msg += ": " + r.Note
		}
		e = toolerr.New(toolerr.Restricted, "approval_denied", "%s", msg)
	}
	e.ApprovalID = r.ID
	e.Check = d.Check
	return nil, e
}
