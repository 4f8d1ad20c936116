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

	"github.com/klocklabs/klock/enforcer/eventlog"
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
	approvals  approval.Queue
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
	events     eventlog.Sink
	vault      vault            // confidential arguments' handles (confidential.go)
	now        func() time.Time // WithClock: the rollback windows' clock
}

// Option configures New.
type Option func(*Gateway)

// WithCharger sets the budget seam (nil: no budget).
func WithCharger(c check.Charger) Option { return func(g *Gateway) { g.charger = c } }

// WithClock sets the clock rollback windows are measured with (default
// time.Now; tests move it).
func WithClock(now func() time.Time) Option { return func(g *Gateway) { g.now = now } }

// WithEvents publishes the gateway's decisions that matter to a security
// team as event records (package eventlog): approval asked and given,
// budget refusals, denied calls. Publish must not block.
func WithEvents(s eventlog.Sink) Option { return func(g *Gateway) { g.events = s } }

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
func New(m *policy.Manifest, p *check.Pipeline, a *audit.Log, ap approval.Queue, is *idem.Store, opts ...Option) (*Gateway, error) {
	if p == nil || a == nil || ap == nil || is == nil {
		return nil, errors.New("gateway: the pipeline, audit log, approval store and idempotency store are all required")
	}
	g := &Gateway{p: p, audit: a, approvals: ap, idem: is, agent: m.Agent.ID, timeout: DefaultApprovalTimeout, hash: a.Hasher(), now: time.Now}
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
//
// The phases are the pipeline's: decide, check ownership, replay by
// idempotency key, take leases, reserve budget, audit the dispatch,
// dispatch, reconcile, check the output, audit the result.
func (g *Gateway) CallWith(ctx context.Context, call *check.Call, dispatch Dispatch, invoke Invoker) (Outcome, *toolerr.Error) {
	c := &gatewayCall{g: g, ctx: ctx, call: call, invoke: invoke, start: time.Now()}
	c.callID = newCallID()
	// A REVERSIBLE-WRITE of this run past its window changes how the
	// pipeline decides its tool: mark them first.
	g.expire(call.RunID)
	if e := c.decide(); e != nil {
		return c.refuse(e, "deny")
	}
	if e, verdict := c.authorize(); e != nil {
		return c.refuse(e, verdict)
	}
	// Idempotency: one effect per key, whatever the retries.
	if c.d.IdemKey != "" {
		unlock := g.idem.Lock(c.d.IdemKey)
		defer unlock()
		if e, ok := g.idem.Get(c.d.IdemKey); ok {
			return c.replay(e.Result)
		}
	}
	// Leases on what the tool touches, held until the call ends, however
	// it ends: taken before anything is reserved, so a refusal costs
	// nothing.
	var held []lease.Lease
	if g.leases != nil {
		release, leases, holder, e := g.leases.acquire(c.ctx, call, c.callID, c.d.Tool)
		if e != nil {
			return c.refuse(e, "deny")
		}
		defer release()
		held = leases
		c.d.Evidence = append(c.d.Evidence, leaseEvidence(leases))
		if holder != (lease.Holder{}) {
			// A plugin run under klock for this call takes its leases as
			// the call's (session.Options.LeaseHolder).
			c.ctx = lease.ContextWithHolder(c.ctx, holder)
		}
	}
	if e := c.reserve(); e != nil {
		return c.refuse(e, "deny")
	}
	if g.leases != nil {
		// The last moment before the effect: a gateway paused since it
		// took its leases may have lost them to another host.
		if e := g.leases.fenced(c.ctx, call.Tool, held); e != nil {
			c.g.release(c.ctx, call, c.res, "the call's leases no longer held at dispatch")
			return c.refuse(e, "deny")
		}
	}
	// Seed 002: a non-idempotent tool is never retried blindly; the
	// check and the record are one step, so two identical calls racing
	// here do not both run.
	if e := g.p.Dispatching(call, &c.d, c.callID); e != nil {
		c.g.release(c.ctx, call, c.res, "a call with the same arguments reached the tool first")
		return c.refuse(e, "deny")
	}
	if e := c.recordDispatch(); e != nil {
		g.p.NotDispatched(call, &c.d, c.callID)
		return Outcome{}, e
	}
	out, te, err := c.dispatch(dispatch)
	if errors.Is(err, ErrNotDispatched) {
		g.p.NotDispatched(call, &c.d, c.callID)
	}
	chargeErr := c.reconcile(&out, te, err)
	if err == nil || out.Charged != nil {
		c.g.ran(call, c.callID, c.approvalID, &out, te)
	}
	te = c.accept(out, te)
	c.recordResult(out, te, chargeErr)
	if te != nil {
		return Outcome{}, te
	}
	return out, nil
}

// gatewayCall is one call on its way through CallWith: what each phase
// decided that the later ones and the audit records need.
type gatewayCall struct {
	g          *Gateway
	ctx        context.Context // the call's, with its lease holder once leases are taken
	call       *check.Call
	invoke     Invoker
	start      time.Time
	callID     string
	d          check.Decision
	verdict    string // allow, or approved after an escalation
	approvalID string
	res        check.Reservation
	dur        time.Duration // from the start to the dispatch's return
	// toolArgs are what the tool receives when they are not call.Args
	// (confidential.go); secrets the call's marked plaintexts.
	toolArgs map[string]any
	secrets  secrets
}

// decide runs the pipeline on the plaintext of the call's confidential
// arguments and leaves c.call with their handles, for every record that
// follows (confidential.go); a refusal is returned.
func (c *gatewayCall) decide() *toolerr.Error {
	plain, sealed, s, e := c.g.conceal(c.call)
	c.call, c.secrets = sealed, s
	conf := c.g.confidential(c.call.Tool)
	if e != nil {
		c.d = check.Decision{Verdict: check.Deny, Err: e, Check: "schema", Confidential: conf}
		return e
	}
	c.d = c.g.p.Decide(plain)
	// A refusal is as confidential as the call would have been.
	c.d.Confidential = c.d.Confidential || conf
	s.scrubDecision(&c.d)
	if c.d.IdemKey != "" && (c.d.Confidential || len(s) > 0) {
		// Never a plain hash of a confidential value in a record.
		c.d.IdemKey = c.g.hash.Digest(c.d.IdemKey)
	}
	switch {
	case len(s) == 0:
	case c.d.Confidential:
		c.toolArgs = sealed.Args
	default:
		c.toolArgs = plain.Args
	}
	return nil
}

// rec starts an audit record of the call.
func (c *gatewayCall) rec(event string) *audit.Record {
	return &audit.Record{Event: event, Actor: c.g.agent, RunID: c.call.RunID, Tool: c.call.Tool}
}

// refuse audits a refusal and returns it: the refusal stands even if the
// audit fails, which the agent is told too.
func (c *gatewayCall) refuse(e *toolerr.Error, verdict string) (Outcome, *toolerr.Error) {
	r := c.rec("decision")
	r.CallID, r.Verdict, r.Result, r.Check, r.Reason, r.Message, r.ApprovalID = c.callID, verdict, string(e.Class), e.Check, e.Reason, e.Message, e.ApprovalID
	r.SetArgs(c.call.Args, c.d.Confidential, c.g.hash)
	r.DurationMS = ms(time.Since(c.start))
	c.g.refused(c.call, c.callID, e)
	c.receiptRefusal(e)
	if err := c.g.audit.Append(r); err != nil {
		// The refusal stands; the agent learns the audit failed too.
		e = toolerr.New(toolerr.InternalError, "audit", "%s (and the refusal could not be audited: %v)", e.Message, err)
	}
	return Outcome{}, e
}

// authorize applies the pipeline's verdict: a deny refuses, an escalation
// waits for a human's approval, and must_belong_to checks each declared
// ownership through its lookup tool before anything is reserved or
// dispatched. It returns the refusal and its audit verdict, if any.
func (c *gatewayCall) authorize() (*toolerr.Error, string) {
	if c.d.Verdict == check.Deny {
		return c.d.Err, "deny"
	}
	c.verdict = "allow"
	if c.d.Verdict == check.Escalate {
		req, e := c.g.escalate(c.ctx, c.call, &c.d)
		if e != nil {
			return e, "escalate"
		}
		c.verdict, c.approvalID = "approved", req.ID
		c.d.Evidence = append(c.d.Evidence, check.Evidence{GuardName: "approval", Verdict: true, Details: "approved by " + req.DecidedBy + " (" + req.ID + ")"})
		if c.d.Governance {
			c.g.p.Governed(c.call.Tool, c.call.RunID)
		}
	}
	if e := c.g.checkBelongs(c.ctx, c.call, c.d.Tool, c.invoke); e != nil {
		return e, "deny"
	}
	if n := belongsChecked(c.d.Tool); n != "" {
		c.d.Evidence = append(c.d.Evidence, check.Evidence{GuardName: "must_belong_to", Verdict: true, Details: n})
	}
	return nil, ""
}

// replay answers a call whose idempotency key already has a result with
// that result, audited as a replay: one effect per key.
func (c *gatewayCall) replay(result json.RawMessage) (Outcome, *toolerr.Error) {
	r := c.rec("decision")
	r.CallID, r.Verdict, r.Result, r.Check, r.IdemKey, r.ApprovalID = c.callID, "replay", "ok", "idempotency", c.d.IdemKey, c.approvalID
	r.SetArgs(c.call.Args, c.d.Confidential, c.g.hash)
	r.SetOutput(result)
	if err := c.g.audit.Append(r); err != nil {
		return Outcome{}, auditErr(err)
	}
	if c.approvalID != "" {
		_ = c.g.approvals.MarkUsed(c.approvalID)
	}
	return Outcome{Result: result, Replayed: true}, nil
}

// reserve holds the call's worst-case cost in the budget before dispatch.
func (c *gatewayCall) reserve() *toolerr.Error {
	if c.g.charger == nil {
		return nil
	}
	if c.d.Confidential {
		c.d.ArgsDigest = c.g.hash.Digest(c.call.Args)
	}
	var err error
	if c.res, err = c.g.charger.Reserve(c.ctx, c.call, &c.d); err != nil {
		e := toolerr.From(err)
		e.Check = "budget"
		return e
	}
	return nil
}

// recordDispatch audits the dispatch, with what the call left in the
// rate-limit counters (the audit log is their write-ahead log: the
// counters' own store is not flushed on a call's path, and a restart
// merges these records back, Open), and consumes its approval; a call
// that cannot be audited or whose approval cannot be consumed is not
// dispatched, and its reservation is released.
func (c *gatewayCall) recordDispatch() *toolerr.Error {
	r := c.rec("dispatch")
	r.CallID, r.Verdict, r.Check, r.IdemKey, r.ApprovalID = c.callID, c.verdict, c.d.Check, c.d.IdemKey, c.approvalID
	r.SetArgs(c.call.Args, c.d.Confidential, c.g.hash)
	r.Counters = countersOf(c.d.Use, c.d.RetryKey)
	if err := c.g.audit.Append(r); err != nil {
		c.g.release(c.ctx, c.call, c.res, "the dispatch could not be audited")
		return auditErr(err)
	}
	if c.approvalID != "" {
		if err := c.g.approvals.MarkUsed(c.approvalID); err != nil {
			c.g.release(c.ctx, c.call, c.res, "the approval could not be consumed")
			return toolerr.New(toolerr.InternalError, "approval_store", "could not consume approval %s: %v", c.approvalID, err)
		}
	}
	return nil
}

// dispatch runs the call within the tool's timeout and classifies its
// error: a failed non-idempotent tool must not be retried blindly.
func (c *gatewayCall) dispatch(dispatch Dispatch) (Outcome, *toolerr.Error, error) {
	dctx, cancel := context.WithTimeout(c.ctx, c.d.Timeout)
	if c.toolArgs != nil {
		dctx = withToolArgs(dctx, c.call.Tool, c.toolArgs)
	}
	out, err := dispatch(dctx)
	cancel()
	if c.d.Confidential && c.d.Tool != nil {
		c.g.vault.redactor(c.d.Tool).redactOutcome(&out)
	}
	c.secrets.scrubOutcome(&out)
	c.dur = time.Since(c.start)
	var te *toolerr.Error
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && c.ctx.Err() == nil:
		te = toolerr.New(toolerr.Timeout, "deadline", "%s did not answer within %s", c.call.Tool, c.d.Timeout).WithRetry(idempotent(c.d.Tool))
	default:
		te = toolerr.From(err)
		if te.Class == toolerr.InternalError && te.Reason == "internal" {
			te.Reason = "dispatch"
		}
		// The gateway does not know whether the tool acted: a
		// non-idempotent tool must not be retried blindly.
		te.Retryable = te.Retryable && idempotent(c.d.Tool)
	}
	if te != nil {
		te.Message = c.secrets.scrub(te.Message) // a tool allowed to see it may quote it
	}
	return out, te, err
}

// reconcile settles the reservation: released if the call never reached
// the tool, kept charged if it failed (whether it acted is unknown),
// charged at the reported cost otherwise. A failure leaves the hold open
// and charged (never fails open) and is returned for the audit.
func (c *gatewayCall) reconcile(out *Outcome, te *toolerr.Error, err error) error {
	if c.g.charger == nil || c.res == nil {
		return nil
	}
	ctx, call, d := c.ctx, c.call, &c.d
	var chargeErr error
	switch {
	case te != nil && errors.Is(err, ErrNotDispatched):
		c.g.release(ctx, call, c.res, te.Message)
	case te != nil:
		u := check.Usage{Reason: fmt.Sprintf("the call ended with %s (%s): whether the tool acted is unknown, the reservation stays charged", te.Class, te.Message)}
		u.ContentHash = c.g.contentHash(call.Args, nil, d.Confidential)
		out.Charged, chargeErr = c.g.charger.Reconcile(context.WithoutCancel(ctx), c.res, u)
	default:
		if !out.Usage.Known && out.Usage.Reason == "" {
			out.Usage.Reason = call.Tool + " reported no cost; the reservation stays charged"
		}
		out.Usage.ContentHash = c.g.contentHash(call.Args, out.Result, d.Confidential)
		out.Charged, chargeErr = c.g.charger.Reconcile(context.WithoutCancel(ctx), c.res, out.Usage)
	}
	if chargeErr != nil {
		// The call ran; its hold stays open and charged in the ledger
		// (never fails open). Say so in the log and the audit.
		slog.Error("budget: reconcile failed; the reservation stays charged", "tool", call.Tool, "call_id", c.callID, "err", chargeErr)
	}
	return chargeErr
}

// accept checks a successful result against the output contract, tells
// the pipeline the outcome, registers the contract's rollback and stores
// the result for idempotent replay; it returns the call's error, if any.
func (c *gatewayCall) accept(out Outcome, te *toolerr.Error) *toolerr.Error {
	call, d := c.call, &c.d
	// The output contract: a result that breaks output_schema is the
	// tool's failure and is withheld from the agent (it ran, so its cost
	// above stands).
	if te == nil && !out.ToolError {
		te = c.g.checkOutput(call.Tool, out.Structured)
	}
	c.g.p.Outcome(call.Tool, call.RunID, te != nil || out.ToolError)
	if te == nil && !out.ToolError {
		c.g.registerRollback(call, c.callID, d.Tool, out.Structured, c.invoke)
	}
	if te == nil && d.IdemKey != "" && !out.ToolError {
		if err := c.g.idem.Put(d.IdemKey, call.Tool, out.Result); err != nil {
			// The effect happened; a retry could repeat it. Say so.
			te = toolerr.New(toolerr.InternalError, "idempotency_store", "%s ran, but its result could not be stored for replay (%v): do not retry", call.Tool, err)
		}
	}
	return te
}

// recordResult audits how the call ended; the agent gets its result even
// if this record cannot be written.
func (c *gatewayCall) recordResult(out Outcome, te *toolerr.Error, chargeErr error) {
	r := c.rec("result")
	r.CallID, r.DurationMS, r.IdemKey, r.ApprovalID = c.callID, ms(c.dur), c.d.IdemKey, c.approvalID
	r.TokensUsed = max(out.Usage.TokensUsed, 0)
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
		c.g.recordValues(r, &c.d, c.call.Args, out.Structured)
	}
	if err := c.g.audit.Append(r); err != nil {
		// The call ran and its dispatch is on record; the agent gets its
		// result, and the next call's dispatch record will be refused if
		// the log stays unwritable.
		slog.Error("audit: result record not written", "tool", c.call.Tool, "call_id", c.callID, "err", err)
	}
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
	return t != nil && t.Idempotent()
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
		return nil, queueErr(call, d, "", err)
	}
	if r.State == approval.Pending {
		g.publish(eventlog.KindApprovalAsked, call, &eventlog.Tool{Name: call.Tool, Approval: r.ID, Reason: d.Why})
	}
	id := r.ID
	r, err = g.approvals.Wait(ctx, id, g.wait)
	if err != nil {
		return nil, queueErr(call, d, id, err)
	}
	var e *toolerr.Error
	switch r.State {
	case approval.Approved:
		g.publish(eventlog.KindApprovalGiven, call, &eventlog.Tool{Name: call.Tool, Approval: r.ID, Approver: r.DecidedBy})
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

// queueErr refuses a call whose approval queue failed: never a silent
// approval. A fleet's queue that etcd did not serve is reason
// approval_unreachable (retryable: the request, if filed, is kept);
// any other failure approval_store.
func queueErr(call *check.Call, d *check.Decision, id string, err error) *toolerr.Error {
	what := "filing its approval request"
	if id != "" {
		what = "waiting for approval " + id
	}
	reason := "approval_store"
	if errors.Is(err, approval.ErrUnreachable) {
		reason = "approval_unreachable"
	}
	e := toolerr.New(toolerr.InternalError, reason, "%s needs approval (%s) and the approval queue failed %s: refused: %v",
		call.Tool, d.Why, what, err).WithRetry(reason == "approval_unreachable")
	e.ApprovalID, e.Check = id, d.Check
	return e
}

// publish hands one event record of call to WithEvents' sink.
func (g *Gateway) publish(k eventlog.Kind, call *check.Call, t *eventlog.Tool) {
	if g.events == nil {
		return
	}
	g.events.Publish(eventlog.Record{Kind: k, Session: call.RunID, Agent: g.agent, Tool: t})
}

// refused publishes a refused call: budget.refused for the budget's,
// tool.denied for any other but a pending approval (not a refusal: the
// agent is told to retry).
func (g *Gateway) refused(call *check.Call, callID string, e *toolerr.Error) {
	if e.Reason == "approval_pending" {
		return
	}
	k := eventlog.KindToolDenied
	if e.Check == "budget" {
		k = eventlog.KindBudgetRefused
	}
	// The codes, not the message: a message may quote arguments, which
	// confidential mode keeps out of records.
	g.publish(k, call, &eventlog.Tool{Name: call.Tool, Call: callID, Approval: e.ApprovalID, Reason: strings.TrimSpace(e.Check + " " + e.Reason)})
}

// ran publishes a call that went through to its tool, or that its budget
// charged although the dispatch failed (te: why): the approval that let it
// (if one did), what the budget charged and the tokens it reported. A replay ran nothing and is not published
// (its first run was).
func (g *Gateway) ran(call *check.Call, callID, approvalID string, out *Outcome, te *toolerr.Error) {
	t := &eventlog.Tool{Name: call.Tool, Call: callID, Approval: approvalID, Tokens: max(out.Usage.TokensUsed, 0)}
	if te != nil {
		t.Reason = strings.TrimSpace(te.Check + " " + te.Reason)
	}
	if c := out.Charged; c != nil {
		t.Charged = &eventlog.Money{Units: c.Units, Currency: c.Currency}
	}
	g.publish(eventlog.KindToolCall, call, t)
}
