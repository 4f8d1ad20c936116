package mcpproxy

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzFrame feeds arbitrary bytes to the JSON-RPC framing: parseFrame must
// never panic, must return ErrFrame for anything it rejects, and what it
// accepts must be JSON-RPC 2.0 with a method or an id.
func FuzzFrame(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":1}}}`,
		`[{"jsonrpc":"2.0","id":"a","method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/initialized"}]`,
		`{"jsonrpc":"2.0","id":1.0,"result":{"tools":[]}}`, `{"jsonrpc":"1.0","id":1}`, `[]`, `{"id":{}}`, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, _, err := parseFrame(b)
		if err != nil {
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("error %v does not wrap ErrFrame", err)
			}
			return
		}
		for _, m := range msgs {
			if m.JSONRPC != "2.0" || (m.Method == "" && len(m.ID) == 0) {
				t.Fatalf("accepted %q", b)
			}
			_ = idKey(m.ID)
			if m.Method == "tools/call" {
				name, args, err := decodeCall(m.Params)
				if err == nil && (name == "" || args == nil) {
					t.Fatalf("decodeCall accepted %s without a name or args", m.Params)
				}
				if err != nil && !errors.Is(err, ErrArgs) {
					t.Fatalf("decodeCall error %v does not wrap ErrArgs", err)
				}
			}
		}
	})
}

// FuzzFilterList: a tools/list result of any shape never leaks an
// undeclared tool and always stays valid JSON.
func FuzzFilterList(f *testing.F) {
	f.Add([]byte(`{"tools":[{"name":"a"},{"name":"secret"}],"nextCursor":"x"}`))
	f.Add([]byte(`{"tools":{"name":"secret"}}`))
	f.Add([]byte(`null`))
	p := testProxy(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		out := p.filterList(b)
		var r struct {
			Tools []struct{ Name string } `json:"tools"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("filtered list is not JSON: %s", out)
		}
		for _, tl := range r.Tools {
			if !p.gw.Pipeline().Declared(tl.Name) {
				t.Fatalf("undeclared tool %q leaked from %s", tl.Name, b)
			}
		}
	})
}
