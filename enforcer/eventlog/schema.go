package eventlog

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// schema is the published JSON Schema (draft 2020-12) of a Record.
//
//go:embed schema.json
var schema []byte

// Schema returns the JSON Schema of a Record (`klock schema events`).
func Schema() []byte { return append([]byte(nil), schema...) }

// ErrInvalid: a record does not match the schema.
var ErrInvalid = errors.New("eventlog: record does not match the schema")

var resolved = sync.OnceValues(func() (*jsonschema.Resolved, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, err
	}
	return s.Resolve(nil)
})

// Validate checks one JSON record (a line of klock events -o json or of
// an events file) against the schema.
func Validate(line []byte) error {
	rs, err := resolved()
	if err != nil {
		return fmt.Errorf("eventlog: the embedded schema: %w", err)
	}
	var v any
	if err := json.Unmarshal(line, &v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := rs.Validate(v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}
