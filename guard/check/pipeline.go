package check

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// ErrUnknownTool is returned by governance calls naming an undeclared tool.
var ErrUnknownTool = errors.New("tool is not declared in the manifest")

// contract is one declared tool, compiled.
type contract struct {
	tool              *policy.Tool
	params            []param
	outputs           []param // output_schema, held by CheckOutput
	argNames          []string
	autonomy          *policy.AutonomyCondition
	idemArgs          []string // key_source arguments; nil = all arguments
	timeout           time.Duration
	categoryPerMinute int
	perm              *permission // permission.scope and forbidden (nil: none)

	mu       sync.Mutex
	disabled string             // non-empty: disabled by governance, with the reason
	override *policy.RateLimits // governance's limits, replacing the contract's
	lim      limiter
	// errors counts each run's consecutive failed outcomes (stopper.go);
	// governed holds the runs a human approved a category D tool for.
	errors   map[string]int
	governed map[string]bool
	// dispatched holds, per run, the first call of each argument key of
	// a non-idempotent tool that reached it (retry.go).
	dispatched map[string]map[string]string
	// expired holds, by run, why the tool's REVERSIBLE-WRITE effect in
	// that run is past its rollback window (Irreversible).
	expired map[string]string
}

// declared is what the manifest allows: its rate_limits, KCC's rate_limit
// and the category's per-minute default, the lowest of each.
func (c *contract) declared() policy.RateLimits {
	l := c.tool.RateLimits
	// KCC's rate_limit is requests per minute; the lower of the two applies.
	if c.tool.RateLimit > 0 && (l.PerMinute == 0 || c.tool.RateLimit < l.PerMinute) {
		l.PerMinute = c.tool.RateLimit
	}
	if l.PerMinute == 0 {
		l.PerMinute = c.categoryPerMinute
	}
	return l
}

// limits are the limits in force: governance may only narrow what the
// manifest declares, so each window is the lower of the two (0: none).
func (c *contract) limits() policy.RateLimits {
	l := c.declared()
	if o := c.override; o != nil {
		l.PerRun = narrower(l.PerRun, o.PerRun)
		l.PerMinute = narrower(l.PerMinute, o.PerMinute)
		l.PerHour = narrower(l.PerHour, o.PerHour)
		l.PerDay = narrower(l.PerDay, o.PerDay)
	}
	return l
}

// narrower is the tighter of two limits where 0 means none.
func narrower(a, b int) int {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// Pipeline decides tool calls for one manifest.
type Pipeline struct {
	tools        map[string]*contract
	names        []string
	capabilities map[string]bool
	invokeDenied map[string]bool // tools whose grant omits the invoke operation
	hitl         bool            // effective mode HITL
	hitlWhy      string
	trifecta     policy.Trifecta
	now          func() time.Time
	confidential bool
	state        State // nil: counters and governance in memory only
}

// Option configures New.
type Option func(*Pipeline)

// WithClock sets the clock the rate limits read (tests, benchmarks).
func WithClock(now func() time.Time) Option { return func(p *Pipeline) { p.now = now } }

// WithCapabilities replaces the capabilities the run holds (default: the
// capability code of every declared tool). A declared tool whose capability
// is not held is refused with tool_capability_missing (seed 004's PDP check).
func WithCapabilities(caps []string) Option {
	return func(p *Pipeline) {
		p.capabilities = map[string]bool{}
		for _, c := range caps {
			p.capabilities[c] = true
		}
	}
}

// WithConfidential puts every tool in confidential mode (seed 004 §11):
// the audit keeps argument hashes only and redacts outputs.
func WithConfidential() Option { return func(p *Pipeline) { p.confidential = true } }

// DefaultTimeout applies to a tool with neither timeout_ms nor a category.
const DefaultTimeout = 30 * time.Second

// New compiles m's declared tools into a pipeline.
func New(m *policy.Manifest, opts ...Option) (*Pipeline, error) {
	p := &Pipeline{tools: map[string]*contract{}, now: time.Now, invokeDenied: map[string]bool{}}
	mode, why := m.EffectiveHITL()
	p.hitl, p.hitlWhy, p.trifecta = mode == policy.HITLModeHITL, why, m.Trifecta()
	for i := range m.DeclaredTools {
		t := &m.DeclaredTools[i]
		c := &contract{tool: t, lim: limiter{perRun: map[string]int{}, buckets: map[string]*bucket{}}}
		var err error
		if c.params, err = compileSchema(t.InputSchema, m.Workdir); err != nil {
			return nil, fmt.Errorf("tool %s: %w", t.Name, err)
		}
		if c.outputs, err = compileSchema(t.OutputSchema, m.Workdir); err != nil {
			return nil, fmt.Errorf("tool %s: output_schema: %w", t.Name, err)
		}
		if c.perm, err = compilePermission(t, m.Workdir); err != nil {
			return nil, fmt.Errorf("tool %s: permission: %w", t.Name, err)
		}
		for _, pr := range c.params {
			c.argNames = append(c.argNames, pr.name)
		}
		if c.autonomy, err = policy.CompileAutonomy(t); err != nil {
			return nil, fmt.Errorf("tool %s: autonomy.unsupervised_if: %w", t.Name, err)
		}
		if t.Idempotency.Mode == "key" {
			if c.idemArgs, err = keyArgs(t); err != nil {
				return nil, fmt.Errorf("tool %s: %w", t.Name, err)
			}
		}
		timeout, perMin, _ := CategoryDefaults(t.Category)
		if t.TimeoutMS > 0 {
			timeout = time.Duration(t.TimeoutMS) * time.Millisecond
		}
		if timeout == 0 {
			timeout = DefaultTimeout
		}
		c.timeout, c.categoryPerMinute = timeout, perMin
		p.tools[t.Name] = c
		p.names = append(p.names, t.Name)
	}
	sort.Strings(p.names)
	for _, g := range m.Grants {
		if len(g.Operations) > 0 && !contains(g.Operations, "invoke") {
			p.invokeDenied[g.Tool] = true
		}
	}
	for _, o := range opts {
		o(p)
	}
	if p.capabilities == nil {
		p.capabilities = heldCapabilities(m)
	}
	if p.state != nil {
		if err := p.restore(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Declared reports whether name is a declared tool: what tools/list shows.
// A tool disabled by governance is still declared but not listed.
func (p *Pipeline) Declared(name string) bool {
	c, ok := p.tools[name]
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.disabled == ""
}

// Tools returns the declared tool names, sorted.
func (p *Pipeline) Tools() []string { return p.names }

// Tool returns a declared tool's contract.
func (p *Pipeline) Tool(name string) (*policy.Tool, bool) {
	c, ok := p.tools[name]
	if !ok {
		return nil, false
	}
	return c.tool, true
}

// Decide runs the pipeline on one call.
func (p *Pipeline) Decide(call *Call) Decision {
	// 1. declared + capability + governance.
	c, ok := p.tools[call.Tool]
	if !ok {
		return deny("declared", nil, toolerr.New(toolerr.CapabilityMissing, "undeclared",
			"tool %q is not declared in the agent's manifest: undeclared tools do not exist for this agent", call.Tool))
	}
	t := c.tool
	if code := p.missingCapability(t); code != "" {
		return deny("declared", t, capabilityError(t, code))
	}
	c.mu.Lock()
	disabled, stop := c.disabled, c.stopped(call.RunID)
	c.mu.Unlock()
	if disabled != "" {
		return deny("declared", t, toolerr.New(toolerr.Restricted, "disabled", "%s is disabled by governance: %s", t.Name, disabled))
	}
	if stop != nil {
		return deny("declared", t, stop)
	}
	ev := []Evidence{{GuardName: "declared", Verdict: true, Details: "declared; capability " + t.CapabilityCode() + " held"}}
	// 2. category defaults are compiled into c.timeout and the rate windows.
	d := Decision{Tool: t, Timeout: c.timeout, Confidential: p.confidential || t.AuditLogging.Confidential}
	// 3. schema and context bindings: outside the lock, since a type path
	// argument is resolved on the file system and one slow lookup must not
	// hold every other call of the tool.
	paths, e := c.checkArgs(call.Args, call.Context)
	if e != nil {
		return denyAfter(ev, "schema", t, e)
	}
	ev = append(ev, schemaEvidence(c, paths))
	if e := c.checkPermission(call.Args, paths, d.Confidential); e != nil {
		return denyAfter(ev, "permission", t, e)
	}
	if c.perm != nil {
		ev = append(ev, Evidence{GuardName: "permission", Verdict: true, Details: "arguments within the contract's scope, none forbidden"})
	}
	// Rate limits per argument value and the idempotency key see a path
	// as where it leads: "/d/x" and "/d//x" are one file, one effect.
	canon := call
	if paths != nil {
		canon = &Call{Tool: call.Tool, Args: withPaths(call.Args, paths, kernelView), Context: call.Context, RunID: call.RunID}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// 4. rate limits.
	if e := c.lim.take(c, canon, p.now()); e != nil {
		return denyAfter(ev, "rate", t, e)
	}
	// Counted in memory already: a call whose count cannot be kept is
	// refused, and the memory stays the stricter of the two.
	u, err := p.saveUse(c, canon.RunID)
	if err != nil {
		return denyAfter(ev, "rate", t, toolerr.New(toolerr.InternalError, "rate_state", "%s: %v", t.Name, err))
	}
	d.Use = u
	ev = append(ev, rateEvidence(c.limits()))
	// 5. idempotency key.
	if t.Idempotency.Mode == "key" {
		k, err := idemKey(t.Name, c.idemArgs, canon.Args)
		if err != nil {
			return denyAfter(ev, "idempotency", t, toolerr.New(toolerr.InvalidArgs, "idempotency_key", "%s: %v", t.Name, err))
		}
		d.IdemKey = k
		ev = append(ev, Evidence{GuardName: "idempotency", Verdict: true, Details: "mode key: one effect per key of " + strings.Join(c.idemArgs, ", ")})
	}
	d.RetryKey = retryKey(t, canon.Args)
	// 6–7. side effect, autonomy, HITL / trifecta.
	d.Verdict, d.Check, d.Why = p.autonomy(c, call, paths)
	if d.Verdict == Deny {
		return denyAfter(ev, "autonomy", t, toolerr.New(toolerr.Restricted, "autonomy_denied", "%s: %s", t.Name, d.Why))
	}
	if first := c.retryOf(call.RunID, d.RetryKey); d.RetryKey != "" && first != "" {
		escalate(&d, "retry", t.Name+" is not idempotent and already ran with these arguments in this run ("+first+"): a second call could do it twice")
		d.Retry = true
	}
	// Seed 004 §3.4: a category D tool is governance-only. Its first use
	// in a run waits for a human even where its autonomy would allow it;
	// one approval covers both when the call escalates anyway.
	if c.needsGovernance(call.RunID) {
		escalate(&d, "category", t.Name+" is category D (governance-only): its first use in a run needs a governance approval")
		d.Governance = true
	}
	d.Evidence = append(ev, effectEvidence(t, d.Verdict, d.Check, d.Why))
	return d
}

// escalate makes d an escalation for why: one approval covers every
// reason when the call escalates anyway.
func escalate(d *Decision, check, why string) {
	if d.Verdict == Escalate {
		d.Why += "; " + why
		return
	}
	d.Verdict, d.Check, d.Why = Escalate, check, why
}

// autonomy decides allow or escalate (or deny for else: DENY), mirroring
// policy's permissions matrix so klock explain and the gateway agree.
func (p *Pipeline) autonomy(c *contract, call *Call, paths map[string]pathViews) (Verdict, string, string) {
	t := c.tool
	// External communication inferred too (type external, category D): a
	// flag left out must not make a tool unsupervised.
	gated := t.SideEffects != policy.SideEffectRead || t.ExternalCommunicationWhy() != ""
	if p.hitl && p.trifecta.Present && t.PrivateDataWhy() != "" {
		// Under the forced HITL of the trifecta, what the agent reads of
		// private data is what an injection would exfiltrate: it waits too.
		return Escalate, "trifecta", "lethal trifecta: " + p.hitlWhy + "; every read of private data, write or external call needs a human"
	}
	if p.hitl && gated {
		if p.trifecta.Present {
			return Escalate, "trifecta", "lethal trifecta: " + p.hitlWhy + "; every read of private data, write or external call needs a human"
		}
		return Escalate, "autonomy", "the agent runs HITL: every write or external call needs a human"
	}
	switch {
	case t.SideEffects == policy.SideEffectIrreversibleWrite:
		return Escalate, "effect", "IRREVERSIBLE-WRITE never runs unsupervised"
	case c.expired[call.RunID] != "":
		return Escalate, "effect", "treated as IRREVERSIBLE-WRITE for the rest of the run: " + c.expired[call.RunID]
	case c.autonomy != nil:
		ok, err := c.evalAutonomy(call, paths)
		if ok && err == nil {
			return Allow, "autonomy", ""
		}
		why := "unsupervised_if (" + c.autonomy.Source + ") is false"
		if err != nil {
			why = "unsupervised_if (" + c.autonomy.Source + ") could not be evaluated: " + err.Error()
		}
		if t.Autonomy.Else == "DENY" {
			return Deny, "autonomy", why
		}
		return Escalate, "autonomy", why
	case t.Autonomy.Unsupervised == "always" || t.Autonomy.Unsupervised == "" && t.SideEffects == policy.SideEffectRead:
		return Allow, "autonomy", ""
	default:
		return Escalate, "autonomy", "autonomy: unsupervised never"
	}
}
