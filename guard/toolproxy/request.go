package toolproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/klocklabs/klock/policy"
)

// MaxRequest bounds a request body.
const MaxRequest = 1 << 20

// ErrRequest: the body is not a tool call request.
var ErrRequest = errors.New("bad tool call request")

// Request is seed 004 §5.1's request.
type Request struct {
	Tool    string         `json:"tool"`
	Args    map[string]any `json:"args"`
	Context map[string]any `json:"context"`
}

// DecodeRequest reads one request: a JSON object with tool (a non-empty
// string), args and context (objects, optional), no other field, nothing
// after it, at most MaxRequest bytes.
func DecodeRequest(r io.Reader) (*Request, error) {
	body, err := io.ReadAll(io.LimitReader(r, MaxRequest+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the body: %v", ErrRequest, err)
	}
	if len(body) > MaxRequest {
		return nil, fmt.Errorf("%w: body over %d bytes", ErrRequest, MaxRequest)
	}
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: body is not UTF-8", ErrRequest)
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	var req Request
	if err := d.Decode(&req); err != nil {
		return nil, fmt.Errorf(`%w: want {"tool": "name", "args": {...}, "context": {...}}: %v`, ErrRequest, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the request object", ErrRequest)
	}
	if req.Tool == "" {
		return nil, fmt.Errorf("%w: tool is required", ErrRequest)
	}
	if len(req.Tool) > 256 {
		return nil, fmt.Errorf("%w: tool name over 256 bytes", ErrRequest)
	}
	if req.Args == nil {
		req.Args = map[string]any{}
	}
	// Dotted keys ("task.customer_id") become nested maps, the one form
	// the gateway reads, so a flat key can never shadow a nested value the
	// operator fixed (or the other way round).
	if req.Context, err = policy.NestContext(req.Context); err != nil {
		return nil, fmt.Errorf("%w: context: %v", ErrRequest, err)
	}
	return &req, nil
}
