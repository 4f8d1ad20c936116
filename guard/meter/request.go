package meter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrRequest is returned for a model request the proxy cannot meter.
var ErrRequest = errors.New("model request cannot be metered")

// API is a wire format.
type API string

// The wire formats, by path.
const (
	OpenAIChat      API = "openai-chat"      // POST /v1/chat/completions
	OpenAIResponses API = "openai-responses" // POST /v1/responses
	Anthropic       API = "anthropic"        // POST /v1/messages
)

// APIFor maps a request path to its wire format.
func APIFor(path string) (API, bool) {
	switch path {
	case "/v1/chat/completions":
		return OpenAIChat, true
	case "/v1/responses":
		return OpenAIResponses, true
	case "/v1/messages":
		return Anthropic, true
	}
	return "", false
}

// Request is what the proxy reads from a model call.
type Request struct {
	API    API
	Model  string
	Stream bool
	// MaxOut is the output-token limit the client asked for (0: none).
	MaxOut int64
	// maxField is the member that carries it for this API.
	maxField string
	fields   map[string]json.RawMessage
}

func maxFieldOf(api API, fields map[string]json.RawMessage) string {
	switch api {
	case OpenAIResponses:
		return "max_output_tokens"
	case Anthropic:
		return "max_tokens"
	}
	if _, ok := fields["max_tokens"]; ok {
		if _, ok2 := fields["max_completion_tokens"]; !ok2 {
			return "max_tokens" // older clients
		}
	}
	return "max_completion_tokens"
}

// ParseRequest reads a model request body strictly enough to meter it: a
// JSON object with a string model, an optional boolean stream and an
// optional non-negative integer output limit.
func ParseRequest(api API, body []byte) (*Request, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return nil, fmt.Errorf("%w: body is not a JSON object: %v", ErrRequest, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrRequest)
	}
	r := &Request{API: api, fields: fields, maxField: maxFieldOf(api, fields)}
	if err := json.Unmarshal(fields["model"], &r.Model); err != nil || r.Model == "" {
		return nil, fmt.Errorf("%w: \"model\" must be a non-empty string", ErrRequest)
	}
	if raw, ok := fields["stream"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &r.Stream); err != nil {
			return nil, fmt.Errorf("%w: \"stream\" must be true or false", ErrRequest)
		}
	}
	for _, f := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		raw, ok := fields[f]
		if !ok || string(raw) == "null" {
			continue
		}
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil || n < 0 {
			return nil, fmt.Errorf("%w: %q must be a non-negative integer, got %s", ErrRequest, f, raw)
		}
		if f == r.maxField || r.MaxOut == 0 || n < r.MaxOut {
			r.MaxOut = n
		}
	}
	if api == Anthropic && r.MaxOut == 0 {
		return nil, fmt.Errorf("%w: an Anthropic request needs max_tokens", ErrRequest)
	}
	return r, nil
}

// Rewrite returns the body with the output limit set to maxOut and, for an
// OpenAI chat stream, usage reporting switched on (stream_options.
// include_usage), so the proxy can meter it.
func (r *Request) Rewrite(maxOut int64) ([]byte, error) {
	f := make(map[string]json.RawMessage, len(r.fields)+2)
	for k, v := range r.fields {
		f[k] = v
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		if _, ok := f[k]; ok && k != r.maxField {
			delete(f, k) // one limit, the capped one
		}
	}
	f[r.maxField] = json.RawMessage(fmt.Sprint(maxOut))
	if r.API == OpenAIChat && r.Stream {
		opts := map[string]json.RawMessage{}
		if raw, ok := f["stream_options"]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &opts); err != nil {
				return nil, fmt.Errorf("%w: \"stream_options\" must be an object", ErrRequest)
			}
		}
		opts["include_usage"] = json.RawMessage("true")
		b, _ := json.Marshal(opts)
		f["stream_options"] = b
	}
	return json.Marshal(f)
}
