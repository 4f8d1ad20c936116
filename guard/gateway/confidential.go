package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// Seed 004 §11, confidential mode: a tool receives the arguments its
// contract marks confidential (input_schema.<arg>.confidential) only as
// opaque handles, its text results are redacted by the contract's
// audit_logging.redact patterns, and no record keeps a marked argument's
// plaintext.
//
// The rule, for every call of a tool with marked arguments:
//
//   - The checks (schema, bindings, autonomy) see the plaintext: a marked
//     argument the agent sent as a handle this gateway gave out in the
//     same run is opened first. A handle it never gave out in this run
//     (forged, another run's, or from before a restart: handles live in
//     the gateway's memory only, never on disk) is refused,
//     tool_invalid_args, reason unknown_handle.
//   - Every record (audit, approvals, receipts, idempotency store,
//     rollback journal, event records) sees the handle, in every mode, and
//     any message quoting a marked plaintext has it replaced.
//   - The tool receives the handle in a confidential call (--confidential,
//     or the tool's audit_logging.confidential) and the plaintext
//     otherwise: a tool that is not confidential is the one allowed to see
//     it, and only in an argument its own contract marks. The same
//     plaintext in one run is always the same handle, so a retry is the
//     same call to the tool. What such a tool returns (result or error)
//     has the plaintext replaced by the handle again.
//
// A handle in an argument that is not marked is an opaque string, passed
// as it is. In a confidential call every string in the tool's result
// (MCP text content, structuredContent, a plugin's output) has each match
// of a redact pattern replaced by RedactedText before anything else sees
// it.

// HandlePrefix begins every handle: klock-handle:<26 random base32 chars>.
const HandlePrefix = "klock-handle:"

// RedactedText replaces what a redact pattern matched.
const RedactedText = "[confidential section removed]"

// vault maps handles to plaintexts, per run, in memory only.
type vault struct {
	mu     sync.Mutex
	plain  map[string]vaultEntry // handle → its run and plaintext
	handle map[vaultEntry]string // (run, plaintext) → handle
	// redact are the tools' redact patterns, compiled once.
	redact map[string]redactor
}

// redactor returns t's compiled redact patterns.
func (v *vault) redactor(t *policy.Tool) redactor {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.redact[t.Name]
	if !ok {
		r = compileRedact(t)
		if v.redact == nil {
			v.redact = map[string]redactor{}
		}
		v.redact[t.Name] = r
	}
	return r
}

type vaultEntry struct{ run, plain string }

func (v *vault) seal(run, plain string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := vaultEntry{run, plain}
	if h, ok := v.handle[k]; ok {
		return h
	}
	if v.plain == nil {
		v.plain, v.handle = map[string]vaultEntry{}, map[vaultEntry]string{}
	}
	var b [16]byte
	rand.Read(b[:])
	h := HandlePrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	v.plain[h], v.handle[k] = k, h
	return h
}

func (v *vault) open(run, h string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.plain[h]
	if !ok || e.run != run {
		return "", false
	}
	return e.plain, true
}

// secrets is one call's marked plaintexts and their handles.
type secrets map[string]string // plaintext → handle

// conceal splits call for a tool with marked arguments: plain (what the
// checks see), sealed (what the records see) and the plaintexts; call
// itself, twice, when nothing is marked.
func (g *Gateway) conceal(call *check.Call) (plain, sealed *check.Call, s secrets, e *toolerr.Error) {
	t, ok := g.p.Tool(call.Tool)
	if !ok {
		return call, call, nil, nil
	}
	marked := t.ConfidentialArgs()
	if len(marked) == 0 {
		return call, call, nil, nil
	}
	p, sl := *call, *call
	p.Args, sl.Args = cloneArgs(call.Args), cloneArgs(call.Args)
	s = secrets{}
	for _, name := range marked {
		str, ok := call.Args[name].(string)
		if !ok {
			continue // absent, or not a string: the schema check says so
		}
		if strings.HasPrefix(str, HandlePrefix) {
			pt, ok := g.vault.open(call.RunID, str)
			if !ok {
				if e == nil {
					e = toolerr.New(toolerr.InvalidArgs, "unknown_handle",
						"%s: argument %q is a handle this gateway did not give out in this run (handles do not outlive the gateway process)", call.Tool, name)
				}
				continue // the rest are sealed all the same: the refusal is recorded
			}
			str = pt
		}
		h := g.vault.seal(call.RunID, str)
		p.Args[name], sl.Args[name], s[str] = str, h, h
	}
	return &p, &sl, s, e
}

func cloneArgs(a map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	return out
}

// scrub replaces each marked plaintext in text by its handle, longest
// first (one plaintext may hold another), and then what is left of one
// cut short (a message quotes a long value's first characters): any
// prefix of minPrefix characters or more.
func (s secrets) scrub(text string) string {
	if len(s) == 0 || text == "" {
		return text
	}
	keys := make([]string, 0, len(s))
	for k := range s {
		if k != "" {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		text = strings.ReplaceAll(text, k, s[k])
	}
	for _, k := range keys {
		for n := len(k) - 1; n >= minPrefix; n-- {
			text = strings.ReplaceAll(text, k[:n], s[k])
		}
	}
	return text
}

// minPrefix is the shortest cut-short plaintext scrub finds.
const minPrefix = 8

// scrubDecision keeps marked plaintexts out of what a decision says: its
// refusal and its escalation reason go into records.
func (s secrets) scrubDecision(d *check.Decision) {
	if len(s) == 0 {
		return
	}
	d.Why = s.scrub(d.Why)
	if d.Err != nil {
		d.Err.Message = s.scrub(d.Err.Message)
	}
}

// toolArgsKey carries, on a dispatch's context, the arguments the tool
// receives when they are not the agent's.
type toolArgsKey struct{}

type toolArgs struct {
	tool string
	args map[string]any
}

func withToolArgs(ctx context.Context, tool string, args map[string]any) context.Context {
	return context.WithValue(ctx, toolArgsKey{}, toolArgs{tool, args})
}

// ToolArgs is what a Dispatch or Invoker sends the tool for call: the
// gateway's arguments for it when they differ from the agent's (a
// confidential argument's handle, or the plaintext a handle stands for),
// else call.Args. Every proxy sends these, never the request's bytes as
// they came.
func ToolArgs(ctx context.Context, call *check.Call) map[string]any {
	if a, ok := ctx.Value(toolArgsKey{}).(toolArgs); ok && a.tool == call.Tool {
		return a.args
	}
	return call.Args
}

// ReplacedArgs reports the arguments the gateway gives tool instead of
// the agent's, if it replaced them: a proxy that forwards the request's
// bytes must re-encode them then.
func ReplacedArgs(ctx context.Context, tool string) (map[string]any, bool) {
	a, ok := ctx.Value(toolArgsKey{}).(toolArgs)
	return a.args, ok && a.tool == tool
}

// redactor is a confidential tool's audit_logging.redact, compiled.
type redactor []*regexp.Regexp

func compileRedact(t *policy.Tool) redactor {
	var out redactor
	for _, p := range t.AuditLogging.Redact {
		if re, err := regexp.Compile(p); err == nil { // validated at load
			out = append(out, re)
		}
	}
	return out
}

// redactOutcome removes what the patterns match from every string of the
// tool's result and structured output.
func (r redactor) redactOutcome(out *Outcome) {
	if len(r) > 0 {
		mapOutcome(out, r.redactText)
	}
}

// scrubOutcome gives back a marked plaintext a tool allowed to see it
// returned as its handle: the agent passed the handle and gets the handle.
func (s secrets) scrubOutcome(out *Outcome) {
	if len(s) > 0 {
		mapOutcome(out, s.scrub)
	}
}

func mapOutcome(out *Outcome, f func(string) string) {
	out.Result = mapStrings(out.Result, f)
	out.Structured = mapStrings(out.Structured, f)
}

// mapStrings applies f to every string value of the JSON document raw
// (an MCP content item's "type" excepted: its kind stays what it is); raw
// that is not JSON is taken as one text.
func mapStrings(raw json.RawMessage, f func(string) string) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	var v any
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	if d.Decode(&v) != nil {
		b, _ := json.Marshal(f(string(raw)))
		return b
	}
	b, err := json.Marshal(mapValue(v, f))
	if err != nil {
		return raw
	}
	return b
}

func mapValue(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case []any:
		for i := range x {
			x[i] = mapValue(x[i], f)
		}
	case map[string]any:
		for k := range x {
			if k != "type" {
				x[k] = mapValue(x[k], f)
			}
		}
	}
	return v
}

func (r redactor) redactText(s string) string {
	for _, re := range r {
		s = re.ReplaceAllLiteralString(s, RedactedText)
	}
	return s
}
