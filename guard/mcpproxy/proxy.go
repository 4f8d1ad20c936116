package mcpproxy

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/toolerr"
)

// Proxy holds what both transports share: the gateway and the call context.
type Proxy struct {
	gw       *gateway.Gateway
	context  map[string]any
	runID    string
	enforced string                        // the server's klock session under --enforce
	stopped  atomic.Pointer[toolerr.Error] // set when the wall killed that session (ServerStopped)
}

// Option configures New.
type Option func(*Proxy)

// WithContext sets the context every call is checked with (task bindings
// for must_match, agent_run_id, ...). It comes from the operator, never from
// the model: a client's _meta cannot change it.
func WithContext(ctx map[string]any) Option { return func(p *Proxy) { p.context = ctx } }

// WithRunID scopes per_run limits (default: one run per proxy).
func WithRunID(id string) Option { return func(p *Proxy) { p.runID = id } }

// New builds a proxy over gw.
func New(gw *gateway.Gateway, opts ...Option) *Proxy {
	p := &Proxy{gw: gw}
	for _, o := range opts {
		o(p)
	}
	return p
}

// filterList rewrites a tools/list result to the declared tools. A result
// it cannot read is replaced by an empty list: an unreadable list must not
// leak undeclared tools.
func (p *Proxy) filterList(result json.RawMessage) json.RawMessage {
	var r map[string]json.RawMessage
	if err := json.Unmarshal(result, &r); err != nil || r == nil {
		return json.RawMessage(`{"tools":[]}`)
	}
	var tools []json.RawMessage
	_ = json.Unmarshal(r["tools"], &tools)
	kept := make([]json.RawMessage, 0, len(tools))
	for _, t := range tools {
		var name struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(t, &name) == nil && p.gw.Pipeline().Declared(name.Name) {
			kept = append(kept, t)
		}
	}
	r["tools"], _ = json.Marshal(kept)
	out, _ := json.Marshal(r)
	return out
}

// errorResult is a refusal as an MCP CallToolResult: the agent reads it like
// any tool error (isError), typed in structuredContent and in the text.
func errorResult(e *toolerr.Error) map[string]any {
	text, _ := json.Marshal(e)
	return map[string]any{
		"content":           []any{map[string]any{"type": "text", "text": string(text)}},
		"structuredContent": e,
		"isError":           true,
	}
}

// fixResult replaces nulls in a CallToolResult's structuredContent by the
// MISSING sentinel and reports whether the tool flagged an error.
func fixResult(result json.RawMessage) (json.RawMessage, bool) {
	var r map[string]json.RawMessage
	if err := json.Unmarshal(result, &r); err != nil {
		return result, false
	}
	var isErr bool
	_ = json.Unmarshal(r["isError"], &isErr)
	if sc, ok := r["structuredContent"]; ok {
		fixed := toolerr.ReplaceNullsJSON(sc)
		if string(fixed) != string(sc) {
			r["structuredContent"] = fixed
			out, _ := json.Marshal(r)
			return out, isErr
		}
	}
	return result, isErr
}

// errUpstream is a JSON-RPC error the server returned for a tools/call.
type errUpstream struct{ raw json.RawMessage }

func (e *errUpstream) Error() string { return "upstream error: " + string(e.raw) }

// call runs one tools/call through the gateway. send forwards the original
// request and returns the server's response message. The returned frame is
// what goes back to the client.
func (p *Proxy) call(ctx context.Context, req message, send func(context.Context) (message, error), invoke gateway.Invoker) []byte {
	name, args, err := decodeCall(req.Params)
	if err != nil {
		e := toolerr.New(toolerr.InvalidArgs, "params", "%v", err)
		if name == "" {
			return errorResponse(req.ID, -32602, err.Error())
		}
		return response(req.ID, errorResult(e))
	}
	call := &check.Call{Tool: name, Args: args, Context: p.context, RunID: p.runID}
	var upstreamErr json.RawMessage
	out, te := p.gw.CallWith(ctx, call, func(ctx context.Context) (gateway.Outcome, error) {
		resp, err := send(ctx)
		if err != nil {
			return gateway.Outcome{}, err
		}
		if len(resp.Error) > 0 {
			// A protocol-level error (unknown tool upstream, bad params):
			// pass it through as the server sent it, and audit it.
			upstreamErr = resp.Error
			return gateway.Outcome{Result: resp.Error, ToolError: true}, nil
		}
		out := outcomeOf(resp)
		if out.ToolError {
			if te := p.wallRefusal(name, out.Result); te != nil {
				return gateway.Outcome{Result: out.Result, ToolError: true}, te
			}
		}
		return out, nil
	}, invoke)
	if te != nil {
		return response(req.ID, errorResult(te))
	}
	if upstreamErr != nil {
		b, _ := json.Marshal(struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   json.RawMessage `json:"error"`
		}{"2.0", req.ID, upstreamErr})
		return b
	}
	return response(req.ID, out.Result)
}

var errClosed = errors.New("upstream closed")
