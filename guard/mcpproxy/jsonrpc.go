package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/klocklabs/klock/guard/gateway"
)

// ErrFrame is a frame that is not a JSON-RPC 2.0 message or batch.
var ErrFrame = errors.New("not a JSON-RPC 2.0 message")

// message is the part of a JSON-RPC message the proxy reads. The original
// bytes are what it forwards.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

func (m *message) isRequest() bool  { return m.Method != "" && len(m.ID) > 0 }
func (m *message) isResponse() bool { return m.Method == "" && len(m.ID) > 0 }

// idKey normalises an id for map lookups (1 and 1.0 are the same number;
// "1" is a different, string, id).
func idKey(id json.RawMessage) string {
	var n json.Number
	if err := json.Unmarshal(id, &n); err == nil {
		if f, err := n.Float64(); err == nil {
			return fmt.Sprintf("n:%v", f)
		}
	}
	return "s:" + string(bytes.TrimSpace(id))
}

// parseFrame decodes one frame: a message, or a batch (a JSON array).
func parseFrame(b []byte) (msgs []message, batch bool, err error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, false, fmt.Errorf("%w: empty frame", ErrFrame)
	}
	if b[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(b, &raws); err != nil {
			return nil, true, fmt.Errorf("%w: %v", ErrFrame, err)
		}
		if len(raws) == 0 {
			return nil, true, fmt.Errorf("%w: empty batch", ErrFrame)
		}
		for _, r := range raws {
			m, err := parseMessage(r)
			if err != nil {
				return nil, true, err
			}
			msgs = append(msgs, m)
		}
		return msgs, true, nil
	}
	m, err := parseMessage(b)
	if err != nil {
		return nil, false, err
	}
	return []message{m}, false, nil
}

func parseMessage(b []byte) (message, error) {
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	if m.JSONRPC != "2.0" {
		return m, fmt.Errorf("%w: jsonrpc is %q, want \"2.0\"", ErrFrame, m.JSONRPC)
	}
	if m.Method == "" && len(m.ID) == 0 {
		return m, fmt.Errorf("%w: neither a method nor an id", ErrFrame)
	}
	if len(m.ID) > 0 && !validID(m.ID) {
		return m, fmt.Errorf("%w: id must be a string, a number or null", ErrFrame)
	}
	return m, nil
}

func validID(id json.RawMessage) bool {
	var v any
	if json.Unmarshal(id, &v) != nil {
		return false
	}
	switch v.(type) {
	case string, float64, nil:
		return true
	}
	return false
}

// callParams are tools/call's params.
type callParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ErrArgs is a tools/call whose params cannot be read as {name, arguments}.
var ErrArgs = errors.New("tools/call params")

// decodeCall reads a tools/call's tool name and arguments. Arguments must
// be a JSON object (or absent); numbers decode as float64.
func decodeCall(params json.RawMessage) (string, map[string]any, error) {
	var p callParams
	if err := json.Unmarshal(params, &p); err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrArgs, err)
	}
	if p.Name == "" {
		return "", nil, fmt.Errorf("%w: missing tool name", ErrArgs)
	}
	args := map[string]any{}
	if a := bytes.TrimSpace(p.Arguments); len(a) > 0 && !bytes.Equal(a, []byte("null")) {
		if a[0] != '{' {
			return p.Name, nil, fmt.Errorf("%w: arguments must be a JSON object", ErrArgs)
		}
		if err := json.Unmarshal(a, &args); err != nil {
			return p.Name, nil, fmt.Errorf("%w: arguments: %v", ErrArgs, err)
		}
	}
	return p.Name, args, nil
}

// response builds a JSON-RPC response frame.
func response(id json.RawMessage, result any) []byte {
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result"`
	}{"2.0", id, result})
	return b
}

// errorResponse builds a JSON-RPC error frame (id null when unknown).
func errorResponse(id json.RawMessage, code int, msg string) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   any             `json:"error"`
	}{"2.0", id, map[string]any{"code": code, "message": msg}})
	return b
}

// withToolArgs is raw, a tools/call request, with the arguments the
// gateway gives the tool when they are not the agent's (a confidential
// argument's handle): its other params (_meta) are kept as sent. It never
// forwards the agent's arguments when it cannot replace them.
func withToolArgs(ctx context.Context, m message, raw []byte) ([]byte, error) {
	var p struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return raw, nil
	}
	args, ok := gateway.ReplacedArgs(ctx, p.Name)
	if !ok {
		return raw, nil
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(m.Params, &params); err != nil {
		return nil, fmt.Errorf("%w: re-encode the call with its handles: %v", gateway.ErrNotDispatched, err)
	}
	var err error
	if params["arguments"], err = json.Marshal(args); err != nil {
		return nil, fmt.Errorf("%w: re-encode the call with its handles: %v", gateway.ErrNotDispatched, err)
	}
	if m.Params, err = json.Marshal(params); err != nil {
		return nil, fmt.Errorf("%w: %v", gateway.ErrNotDispatched, err)
	}
	return json.Marshal(m)
}
