package mcpproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/gateway"
)

// The gateway calls tools on its own behalf (a must_belong_to lookup, a
// killed run's rollback): these are tools/call requests the proxy makes
// with ids of its own ("klock-N"), which the client never sees.

var ownIDs atomic.Uint64

func (p *Proxy) ownCall(ctx context.Context, c *check.Call) (message, []byte, error) {
	id, _ := json.Marshal(fmt.Sprintf("klock-%d", ownIDs.Add(1)))
	call := map[string]any{"name": c.Tool, "arguments": gateway.ToolArgs(ctx, c)}
	if who := p.actsAs(c.Tool); who != "" {
		call["_meta"] = map[string]string{MetaActsAs: who}
	}
	params, err := json.Marshal(call)
	if err != nil {
		return message{}, nil, fmt.Errorf("encode the call of %s: %w", c.Tool, err)
	}
	m := message{JSONRPC: "2.0", ID: id, Method: "tools/call", Params: params}
	raw, err := json.Marshal(m)
	return m, raw, err
}

// outcomeOf reads a tools/call response as the gateway's outcome.
func outcomeOf(resp message) gateway.Outcome {
	if len(resp.Error) > 0 {
		return gateway.Outcome{Result: resp.Error, ToolError: true}
	}
	res, isErr := fixResult(resp.Result)
	return gateway.Outcome{Result: res, ToolError: isErr, Structured: structuredOf(resp.Result), Usage: usageOf(resp.Result)}
}

// stdioInvoker reaches the server of a stdio session.
func (s *stdioSession) invoker() gateway.Invoker {
	return func(ctx context.Context, c *check.Call) (gateway.Outcome, error) {
		m, raw, err := s.p.ownCall(ctx, c)
		if err != nil {
			return gateway.Outcome{}, fmt.Errorf("%w: %v", gateway.ErrNotDispatched, err)
		}
		resp, err := s.dispatch(ctx, m, raw)
		if err != nil {
			return gateway.Outcome{}, err
		}
		return outcomeOf(resp), nil
	}
}

// httpInvoker reaches the upstream with the client's session headers (its
// Mcp-Session-Id and authorization), copied so it still works after the
// client's request has been answered.
func (p *Proxy) httpInvoker(client *http.Client, upstream *url.URL, in *http.Request) gateway.Invoker {
	hdr := in.Header.Clone()
	return func(ctx context.Context, c *check.Call) (gateway.Outcome, error) {
		m, raw, err := p.ownCall(ctx, c)
		if err != nil {
			return gateway.Outcome{}, fmt.Errorf("%w: %v", gateway.ErrNotDispatched, err)
		}
		x := &exchange{client: client, upstream: upstream, in: &http.Request{Header: hdr}, body: raw, w: discard{}, id: m.ID, actsAs: p.actsAs(c.Tool)}
		resp, err := x.send(ctx)
		if err != nil {
			return gateway.Outcome{}, err
		}
		return outcomeOf(resp), nil
	}
}

// discard is the response writer of a call the client never sees: events
// the upstream streams before the answer go nowhere.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// structuredOf returns a CallToolResult's structured output as the server
// sent it (before nulls become MISSING): structuredContent, else the JSON
// object or array its only text block holds.
func structuredOf(result json.RawMessage) json.RawMessage {
	var r struct {
		Structured json.RawMessage `json:"structuredContent"`
		Content    []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(result, &r) != nil {
		return nil
	}
	if len(r.Structured) > 0 {
		return r.Structured
	}
	if len(r.Content) == 1 && r.Content[0].Type == "text" && json.Valid([]byte(r.Content[0].Text)) {
		t := []byte(r.Content[0].Text)
		for _, b := range t {
			switch b {
			case ' ', '\t', '\r', '\n':
				continue
			case '{', '[':
				return t
			}
			break
		}
	}
	return nil
}
