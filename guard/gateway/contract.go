package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// The parts of a Tool Trust Contract that need the tool's answer, or a
// second tool: the output contract, must_belong_to lookups, and the result
// values the audit records.

// decodeStructured reads a tool's structured output (nil when it gave none).
func decodeStructured(raw json.RawMessage) (any, bool) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, false
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil, false
	}
	return v, true
}

// checkOutput holds the structured output to the contract's output_schema.
func (g *Gateway) checkOutput(tool string, structured json.RawMessage) *toolerr.Error {
	v, _ := decodeStructured(structured)
	return g.p.CheckOutput(tool, v)
}

// selfRecorded are audit_logging.records names every record already holds
// in its own fields (actor, time, run_id): they are not copied again.
var selfRecorded = map[string]bool{"actor": true, "timestamp": true, "agent_run_id": true, "tool": true}

// recordValues copies the values audit_logging.records names, from the
// arguments or the result's top-level fields (refund_id), into r; in
// confidential mode their keyed digests.
func (g *Gateway) recordValues(r *audit.Record, d *check.Decision, args map[string]any, structured json.RawMessage) {
	if d.Tool == nil || len(d.Tool.AuditLogging.Records) == 0 {
		return
	}
	out, _ := decodeStructured(structured)
	res, _ := out.(map[string]any)
	vals := map[string]any{}
	for _, name := range d.Tool.AuditLogging.Records {
		if selfRecorded[name] {
			continue
		}
		if v, ok := args[name]; ok {
			vals[name] = v
		} else if v, ok := res[name]; ok {
			vals[name] = v
		}
	}
	if len(vals) == 0 {
		return
	}
	if !d.Confidential {
		r.Recorded = vals
		return
	}
	r.RecordedHMAC = make(map[string]string, len(vals))
	for k, v := range vals {
		r.RecordedHMAC[k] = g.hash.Digest(v)
	}
}

// checkBelongs enforces each must_belong_to of the call's contract: the
// declared lookup tool is called (through this gateway: checked, audited)
// with the owner argument, and the argument's value must be among its
// result's values of the same field. The lookup failing, or no way to
// reach it, refuses the call: an ownership that cannot be checked is not
// assumed.
func (g *Gateway) checkBelongs(ctx context.Context, call *check.Call, t *policy.Tool, invoke Invoker) *toolerr.Error {
	if t == nil {
		return nil
	}
	names := make([]string, 0, len(t.InputSchema))
	for n, s := range t.InputSchema {
		if s != nil && s.MustBelongTo != "" && s.Lookup != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		s := t.InputSchema[name]
		v, ok := call.Args[name]
		if !ok || v == nil {
			continue // an absent optional argument belongs to nobody
		}
		owner := call.Args[s.MustBelongTo]
		e := func(c toolerr.Class, reason, format string, a ...any) *toolerr.Error {
			te := toolerr.New(c, reason, "%s: argument %q must belong to %s %s: %s", call.Tool, name, s.MustBelongTo, short(owner), fmt.Sprintf(format, a...))
			te.Check = "must_belong_to"
			return te
		}
		if invoke == nil {
			return e(toolerr.InternalError, "lookup_unavailable", "this gateway cannot reach the lookup tool %s, so ownership cannot be checked", s.Lookup)
		}
		lc := &check.Call{Tool: s.Lookup, Args: map[string]any{s.MustBelongTo: owner}, Context: call.Context, RunID: call.RunID}
		out, te := g.CallWith(ctx, lc, func(ctx context.Context) (Outcome, error) { return invoke(ctx, lc) }, invoke)
		switch {
		case te != nil:
			return e(toolerr.InternalError, "lookup_failed", "the lookup %s failed (%s: %s)", s.Lookup, te.Class, te.Message)
		case out.ToolError:
			return e(toolerr.InternalError, "lookup_failed", "the lookup %s returned an error", s.Lookup)
		}
		res, _ := decodeStructured(out.Structured)
		if !holds(res, name, v) {
			return e(toolerr.SandboxViolation, "not_owned", "%s %s is not among the %s values %s returned for it", name, short(v), name, s.Lookup)
		}
	}
	return nil
}

// holds reports whether doc has, at any depth, a field named field equal to
// want (an id in a list of records: [{"transaction_id": "tx_1"}, ...]), or
// a list of bare values under that field name or at the top.
func holds(doc any, field string, want any) bool { return holdsAt(doc, field, want, true) }

func holdsAt(doc any, field string, want any, bare bool) bool {
	switch x := doc.(type) {
	case map[string]any:
		for k, v := range x {
			if k == field && sameScalar(v, want) {
				return true
			}
			if holdsAt(v, field, want, k == field) {
				return true
			}
		}
	case []any:
		for _, v := range x {
			if bare && sameScalar(v, want) || holdsAt(v, field, want, false) {
				return true
			}
		}
	}
	return false
}

func sameScalar(a, b any) bool {
	switch a.(type) {
	case string, float64, bool:
		return a == b
	}
	return false
}

func short(v any) string {
	s := fmt.Sprintf("%q", fmt.Sprint(v))
	if len(s) > 80 {
		s = s[:77] + `…"`
	}
	return s
}

// belongsChecked names the must_belong_to bindings checkBelongs confirmed
// through their lookup tools ("" when the tool has none).
func belongsChecked(t *policy.Tool) string {
	if t == nil {
		return ""
	}
	var out []string
	for n, s := range t.InputSchema {
		if s != nil && s.MustBelongTo != "" && s.Lookup != "" {
			out = append(out, n+" belongs to "+s.MustBelongTo+" per "+s.Lookup)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}
