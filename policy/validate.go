package policy

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

var (
	capabilityRe = regexp.MustCompile(`^tool\.[a-z0-9_][a-z0-9_.-]*\.[a-z]+$`)
)

// wildcardToolNames are names that mean "anything", which KCC forbids.
var wildcardToolNames = map[string]bool{"any": true, "all": true, "*": true, "tool:any": true, "every": true}

func checkEnum(r *report, field, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	r.errorf("enum", field, "want one of "+strings.Join(allowed, ", ")+didYouMean(value, allowed),
		"%q is not allowed", value)
}

func validate(m *Manifest, r *report) {
	validateHeader(m, r)
	validateIntents(m, r)
	validateTools(m, r)
	validateHITL(m, r)
	validateNetwork(m, r)
	validateCost(m, r)
	validateGrants(m, r)
	validateEnforceable(m, r)
	if m.Signature != nil {
		checkEnum(r, "signature.algorithm", m.Signature.Algorithm, "ed25519")
	}
}

func validateHeader(m *Manifest, r *report) {
	switch {
	case !m.has("apiVersion"):
		r.errorf("required", "apiVersion", "add apiVersion: "+APIVersion, "missing")
	case m.APIVersion != APIVersion:
		r.errorf("enum", "apiVersion", "want "+APIVersion, "unsupported version %q", m.APIVersion)
	}
	if !ValidName(m.Agent.ID, 128) {
		if m.Agent.ID == "" {
			r.errorf("required", "agent.id", "add agent: {id: my-agent-01}", "missing: every triple's subject is the agent id")
		} else {
			r.errorf("format", "agent.id", "use letters, digits, '.', '_' and '-' (at most 128)", "%q is not a valid agent id", m.Agent.ID)
		}
	}
	if m.Agent.Maturity != "" {
		checkEnum(r, "agent.maturity", m.Agent.Maturity, "L1", "L2", "L3")
	}
	checkEnum(r, "mode", string(m.Mode), string(ModeStrict), string(ModePermissive))
	checkEnum(r, "baseline", string(m.Baseline), string(BaselineSystemRO), string(BaselineNone))
	checkEnum(r, "tmp", string(m.Tmp), string(TmpPrivate), string(TmpHost))
	if m.Workdir != "" && !path.IsAbs(m.Workdir) {
		r.errorf("format", "workdir", "write an absolute path, e.g. /srv/repo", "%q is relative", m.Workdir)
	}
}

func validateIntents(m *Manifest, r *report) {
	seen := map[string]int{}
	for i, in := range m.Intents {
		f := fmt.Sprintf("intents[%d]", i)
		if in.Subject != "" && in.Subject != m.Agent.ID {
			r.errorf("subject", f+".subject", "drop subject or write "+m.Agent.ID, "subject %q is not this manifest's agent %q", in.Subject, m.Agent.ID)
		}
		if strings.HasPrefix(in.Object.Path.Path, WorkdirVar) {
			r.errorf("workdir", f, "set workdir: /absolute/dir, or write an absolute path", "%s uses ${workdir} but the manifest has no workdir", in.raw)
			continue
		}
		switch in.Object.Type {
		case ObjNet:
			if in.Predicate != Consumes && in.Predicate != Provides {
				r.errorf("predicate", f, "use CONSUMES (connect, send) or PROVIDES (bind, listen) for NET", "%s has no meaning on a network object", in.Predicate)
			}
		case ObjProc:
			if in.Predicate != Provides {
				r.errorf("predicate", f, "write PROVIDES "+in.Object.String()+" to allow executing it", "%s has no meaning on a process object", in.Predicate)
			}
		case ObjFile:
			if in.Object.Path.Path == "/" && in.Object.Path.Match == MatchSubtree && in.Predicate != Consumes && in.Predicate != DependsOn {
				r.warnf("broad-scope", f, "narrow it to the directories the agent works in", "%s on the whole file system declares nothing", in.Predicate)
			}
		}
		key := in.String()
		if j, dup := seen[key]; dup {
			r.warnf("duplicate-intent", f, "remove one", "same intent as intents[%d]", j)
		} else {
			seen[key] = i
		}
	}
}

func validateTools(m *Manifest, r *report) {
	names := map[string]int{}
	for i := range m.DeclaredTools {
		t := &m.DeclaredTools[i]
		f := fmt.Sprintf("declared_tools[%d]", i)
		switch {
		case t.Name == "":
			r.errorf("required", f+".name", "name the tool", "missing")
		case wildcardToolNames[strings.ToLower(t.Name)] || strings.ContainsAny(t.Name, "*?"):
			r.errorf("wildcard-tool", f+".name", "declare each tool by its exact name: tools are declared exhaustively (KCC surface 4)", "%q is a wildcard", t.Name)
		case !ValidName(t.Name, 128):
			r.errorf("format", f+".name", "use letters, digits, '.', '_' and '-'", "%q is not a valid tool name", t.Name)
		}
		if j, dup := names[t.Name]; dup && t.Name != "" {
			r.errorf("duplicate-tool", f+".name", "declare each tool once", "%q is already declared at declared_tools[%d]", t.Name, j)
		}
		names[t.Name] = i
		if t.Type != "" {
			checkEnum(r, f+".type", t.Type, "read", "write", "external", "internal")
		}
		if t.BlastRadius == "" {
			r.errorf("required", f+".blast_radius", "add blast_radius: read | local | domain | organizational", "missing: the blast radius gates HOTL")
		} else {
			checkEnum(r, f+".blast_radius", t.BlastRadius, "read", "local", "domain", "organizational")
		}
		if t.Category != "" {
			checkEnum(r, f+".category", t.Category, "A", "B", "C", "D")
		}
		if t.Capability != "" && !capabilityRe.MatchString(t.Capability) {
			r.errorf("format", f+".capability", "write tool.<name>.invoke", "%q is not a capability code", t.Capability)
		}
		if t.RateLimit < 0 || t.TimeoutMS < 0 {
			r.errorf("range", f, "use non-negative limits", "negative rate_limit or timeout_ms")
		}
		validateSideEffects(t, f, r)
		validateTouches(m, t, f+".touches", r)
		validateSchema(t.InputSchema, f+".input_schema", m.Workdir, r)
		validateSchema(t.OutputSchema, f+".output_schema", m.Workdir, r)
		validateRates(t.RateLimits, f+".rate_limits", t, r)
		validateConfidential(t, f, r)
		// A binary without conditions (klock-runtime) leaves them to
		// klockd, which checks the manifest again when it admits it.
		if _, err := CompileAutonomy(t); err != nil && !errors.Is(err, ErrNoConditions) {
			r.errorf("cel", f+".autonomy.unsupervised_if", "write a CEL boolean over the arguments, e.g. amount_usd <= 50.0 && context.account.tier != \"enterprise\"", "%v", err)
		}
	}
}

func validateSideEffects(t *Tool, f string, r *report) {
	if t.SideEffects == "" {
		r.errorf("required", f+".side_effects", "classify the tool by its least reversible effect: READ, REVERSIBLE-WRITE or IRREVERSIBLE-WRITE", "missing")
		return
	}
	checkEnum(r, f+".side_effects", string(t.SideEffects), string(SideEffectRead), string(SideEffectReversibleWrite), string(SideEffectIrreversibleWrite))
	if t.SideEffects == SideEffectReversibleWrite && strings.TrimSpace(t.Rollback.Mechanism) == "" {
		r.errorf("no-rollback", f+".side_effects", "name the compensating action in rollback.mechanism (e.g. void_refund(refund_id)), or classify it IRREVERSIBLE-WRITE",
			"REVERSIBLE-WRITE without a named rollback mechanism is IRREVERSIBLE-WRITE (seed 002)")
	}
	if _, _, err := t.Rollback.Duration(); err != nil && t.SideEffects == SideEffectReversibleWrite {
		r.errorf("rollback-window", f+".rollback.window", "start the window with a duration (24h, 30m, 7d), or write prose without one (session): klock runs the compensation only within it", "%v", err)
	}
	if t.SideEffects == SideEffectIrreversibleWrite && (t.Autonomy.Unsupervised == "always" || t.Autonomy.UnsupervisedIf != "") {
		r.errorf("irreversible-unsupervised", f+".autonomy", "remove unsupervised/unsupervised_if: an IRREVERSIBLE-WRITE always needs approval",
			"an IRREVERSIBLE-WRITE tool can never run unsupervised")
	}
	if t.Autonomy.Unsupervised != "" {
		checkEnum(r, f+".autonomy.unsupervised", t.Autonomy.Unsupervised, "always", "never")
		if t.Autonomy.UnsupervisedIf != "" {
			r.errorf("conflict", f+".autonomy", "keep either unsupervised or unsupervised_if", "unsupervised and unsupervised_if both set")
		}
	}
	if t.Autonomy.Else != "" {
		checkEnum(r, f+".autonomy.else", t.Autonomy.Else, "ESCALATE", "DENY")
	}
	if t.Idempotency.Mode != "" {
		checkEnum(r, f+".idempotency.mode", t.Idempotency.Mode, "natural", "key", "none")
		if t.Idempotency.Mode == "key" && t.Idempotency.KeySource == "" {
			r.errorf("required", f+".idempotency.key_source", "say what the key is derived from, e.g. hash(customer_id, transaction_id)", "mode key needs a key_source")
		}
	}
}

func validateSchema(s map[string]*ParamSchema, f, workdir string, r *report) {
	for name, p := range s {
		pf := f + "." + name
		if p == nil {
			r.errorf("required", pf, "give the argument a type", "empty schema")
			continue
		}
		if p.Type == "" {
			r.errorf("required", pf+".type", "add type: string | number | integer | boolean | enum | array | object | path", "missing")
		} else {
			checkEnum(r, pf+".type", p.Type, "string", "number", "integer", "boolean", "enum", "array", "object", TypePath)
		}
		validatePathParam(p, pf, workdir, r)
		if p.Type == "enum" && len(p.Values) == 0 {
			r.errorf("required", pf+".values", "list the allowed values", "an enum needs values")
		}
		if p.Min != nil && p.Max != nil && *p.Min > *p.Max {
			r.errorf("range", pf, "make min <= max", "min %v is above max %v", *p.Min, *p.Max)
		}
		if p.MinLength != nil && p.MaxLength != nil && *p.MinLength > *p.MaxLength {
			r.errorf("range", pf, "make min_length <= max_length", "min_length above max_length")
		}
		if p.Pattern != "" {
			if _, err := regexp.Compile(p.Pattern); err != nil {
				r.errorf("format", pf+".pattern", "write an RE2 regular expression", "%v", err)
			}
		}
		if p.MustMatch != "" && !strings.HasPrefix(p.MustMatch, "task.") && !strings.HasPrefix(p.MustMatch, "context.") {
			r.errorf("format", pf+".must_match", "bind to the call's context: task.<key> or context.<key>", "%q is not a context binding", p.MustMatch)
		}
	}
}

func validateRates(l RateLimits, f string, t *Tool, r *report) {
	if l.PerRun < 0 || l.PerMinute < 0 || l.PerHour < 0 || l.PerDay < 0 {
		r.errorf("range", f, "use non-negative limits (0 means unlimited)", "negative rate limit")
	}
	for arg, sub := range l.PerArgument {
		if _, ok := t.InputSchema[arg]; !ok {
			r.errorf("unknown-argument", f+".per_argument."+arg, "limit by an argument of input_schema"+didYouMean(arg, keys(t.InputSchema)), "%q is not an argument of %s", arg, t.Name)
		}
		if len(sub.PerArgument) > 0 {
			r.errorf("format", f+".per_argument."+arg, "limit by one argument at a time", "nested per_argument")
		}
	}
	if t.RateLimit > 0 && l.PerMinute > 0 && t.RateLimit != l.PerMinute {
		r.warnf("rate-mismatch", f+".per_minute", "keep one value", "rate_limit (%d/min) and rate_limits.per_minute (%d) differ; the lower applies", t.RateLimit, l.PerMinute)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func validateNetwork(m *Manifest, r *report) {
	if m.Network == nil {
		return
	}
	if m.Network.MaxEgressBytes == 0 && !m.has("network.max_egress_bytes") {
		r.errorf("required", "network.max_egress_bytes", "add max_egress_bytes: N (bytes the session may send), or remove network", "missing")
		return
	}
	if m.Network.MaxEgressBytes <= 0 {
		r.errorf("range", "network.max_egress_bytes", "use a positive number of bytes", "%d is not a budget", m.Network.MaxEgressBytes)
	}
	hasNet := false
	for _, in := range m.Intents {
		hasNet = hasNet || in.Object.Type == ObjNet
	}
	if !hasNet {
		r.warnf("unused", "network.max_egress_bytes", "declare the NET intents it budgets, or remove it", "no NET intent: the agent has no network to budget")
	}
}

func validateHITL(m *Manifest, r *report) {
	checkEnum(r, "hitl.default_mode", string(m.HITL.DefaultMode), string(HITLModeHITL), string(HITLModeHOTL))
	if m.HITL.ApprovalTimeoutSeconds < 0 {
		r.errorf("range", "hitl.approval_timeout_seconds", "use a positive number of seconds", "negative timeout")
	}
	tri := m.Trifecta()
	if tri.Present && m.HITL.DefaultMode == HITLModeHOTL {
		r.warnf("trifecta", "hitl.default_mode", "HITL is forced; remove one of the three capabilities to run HOTL",
			"lethal trifecta: %s (untrusted content) + %s (private data) + %s (external communication); declared HOTL is overridden to HITL",
			tri.Untrusted, tri.Private, tri.External)
	}
	if m.HITL.DefaultMode == HITLModeHOTL && !tri.Present && m.HITL.MaintainerApproval == nil {
		for i, t := range m.DeclaredTools {
			if t.BlastRadius == "organizational" {
				r.errorf("org-approval", fmt.Sprintf("declared_tools[%d].blast_radius", i),
					"have a maintainer sign the approval (klock sign --maintainer NAME -k KEY FILE; a trusted key, checked at launch) or run HITL",
					"%s has organizational blast radius: HOTL needs maintainer approval", t.Name)
			}
		}
	}
	if a := m.HITL.MaintainerApproval; a != nil && a.ApprovedBy == "" {
		r.errorf("required", "hitl.maintainer_approval.approved_by", "name the approving maintainer", "missing")
	}
}

// parentGrantRe is a budget grant key: capability#index.
var parentGrantRe = regexp.MustCompile(`^[^#\s]+#[0-9]{1,9}$`)

func validateCost(m *Manifest, r *report) {
	c := m.CostEnvelope
	if c == nil {
		r.errorf("no-cost-envelope", "cost_envelope", "add cost_envelope with expected_*/max_* tokens, latency, cost and context_efficiency (KCC surface 5)", "missing: an agent without a cost envelope is rejected")
		return
	}
	if c.ParentGrant != "" && !parentGrantRe.MatchString(c.ParentGrant) {
		r.errorf("format", "cost_envelope.parent_grant", "write the delegating grant as capability#index (e.g. orchestrator-01#0)", "%q is not a grant", c.ParentGrant)
	}
	type pair struct {
		name          string
		expected, max int64
	}
	pairs := []pair{
		{"tokens_in", c.ExpectedTokensIn, c.MaxTokensIn},
		{"tokens_out", c.ExpectedTokensOut, c.MaxTokensOut},
		{"latency_ms", c.ExpectedLatencyMS, c.MaxLatencyMS},
	}
	if c.ExpectedCost != nil && c.MaxCost != nil {
		if c.ExpectedCost.Currency != c.MaxCost.Currency {
			r.errorf("currency", "cost_envelope.max_cost", "use "+c.ExpectedCost.Currency+" for both", "expected_cost is %s but max_cost is %s", c.ExpectedCost.Currency, c.MaxCost.Currency)
		} else {
			pairs = append(pairs, pair{"cost", int64(min(c.ExpectedCost.Units, 1<<62)), int64(min(c.MaxCost.Units, 1<<62))})
		}
	}
	for _, name := range []string{"expected_tokens_in", "max_tokens_in", "expected_tokens_out", "max_tokens_out", "expected_latency_ms", "max_latency_ms", "context_efficiency", "expected_cost", "max_cost"} {
		if !m.has("cost_envelope." + name) {
			r.errorf("required", "cost_envelope."+name, "add it: every field of the cost envelope is required", "missing")
		}
	}
	for _, p := range pairs {
		ef, mf := "cost_envelope.expected_"+p.name, "cost_envelope.max_"+p.name
		if !m.has(ef) || !m.has(mf) {
			continue
		}
		if p.expected < 0 || p.max < 0 {
			r.errorf("range", mf, "use non-negative values", "negative value")
			continue
		}
		if p.max <= p.expected {
			r.errorf("max-not-above-expected", mf, fmt.Sprintf("make max_%s greater than expected_%s (%d)", p.name, p.name, p.expected),
				"max_%s (%d) must be greater than expected_%s (%d)", p.name, p.max, p.name, p.expected)
		} else if p.expected > 0 && p.max/p.expected >= 10 {
			r.warnf("loose-envelope", mf, "tighten it toward the expected value",
				"max_%s is %dx expected_%s: the envelope provides no real constraint", p.name, p.max/p.expected, p.name)
		}
	}
	if m.has("cost_envelope.context_efficiency") {
		ce := c.ContextEfficiency
		switch {
		case ce > 1 || ce < 0:
			r.errorf("range", "cost_envelope.context_efficiency", "write a proportion between 0.0 and 1.0", "%v is not a proportion", ce)
		case ce < 0.3:
			r.errorf("context-efficiency", "cost_envelope.context_efficiency", "shrink the system prompt, tool definitions and examples until at least 0.3 (healthy: 0.6-0.8)",
				"%v is below 0.3: the system prompt is consuming the context window", ce)
		case ce < 0.4:
			r.warnf("context-efficiency", "cost_envelope.context_efficiency", "healthy is 0.6-0.8", "%v is concerning: the system prompt may be too elaborate", ce)
		}
	}
}

func validateGrants(m *Manifest, r *report) {
	tools := map[string]bool{}
	var toolNames []string
	for _, t := range m.DeclaredTools {
		tools[t.Name] = true
		toolNames = append(toolNames, t.Name)
	}
	for i, g := range m.Grants {
		f := fmt.Sprintf("grants[%d]", i)
		if !tools[g.Tool] {
			r.errorf("unknown-tool", f+".tool", "grant a declared tool"+didYouMean(g.Tool, toolNames), "%q is not in declared_tools", g.Tool)
		}
		if g.MaxCostPerInvocation != nil && g.MaxTotalCost != nil {
			if g.MaxCostPerInvocation.Currency != g.MaxTotalCost.Currency {
				r.errorf("currency", f+".max_total_cost", "use one currency per grant", "%s vs %s", g.MaxCostPerInvocation.Currency, g.MaxTotalCost.Currency)
			} else if g.MaxCostPerInvocation.Units > g.MaxTotalCost.Units {
				r.errorf("range", f+".max_cost_per_invocation", "make it at most max_total_cost", "%s per call exceeds the total %s", g.MaxCostPerInvocation, g.MaxTotalCost)
			}
		}
		if g.MaxCostPerInvocation == nil && g.MaxTotalCost == nil && g.MaxInvocations == 0 && len(g.Capabilities) == 0 {
			r.warnf("empty-grant", f, "set max_cost_per_invocation, max_total_cost or max_invocations", "the grant limits nothing")
		}
		for j, op := range g.Operations {
			if op == "" || op == "*" {
				r.errorf("wildcard-operation", fmt.Sprintf("%s.operations[%d]", f, j), "name each operation, e.g. invoke", "%q is not an operation", op)
			}
		}
	}
}
