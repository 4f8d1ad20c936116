package mcpproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestWallRefusalIsTyped: under --enforce, a server's permission error (the
// kernel wall refused it) reaches the agent as tool_sandbox_violation naming
// the session, not as the raw EACCES text; without --enforce, and for any
// other tool error, the server's result passes as it was.
func TestWallRefusalIsTyped(t *testing.T) {
	const eacces = `{"content":[{"type":"text","text":"EACCES: permission denied, open '/srv/outside/secret.txt'"}],"isError":true}`
	tests := []struct {
		name, session, result, class string
	}{
		{"node EACCES under enforce", "20260101T000000-abcdef", eacces, "tool_sandbox_violation"},
		{"python errno 13", "s1", `{"content":[{"type":"text","text":"[Errno 13] Permission denied: '/etc/shadow'"}],"isError":true}`, "tool_sandbox_violation"},
		{"EPERM", "s1", `{"content":[{"type":"text","text":"EPERM: operation not permitted, unlink '/x'"}],"isError":true}`, "tool_sandbox_violation"},
		{"other tool error", "s1", `{"content":[{"type":"text","text":"ENOENT: no such file or directory"}],"isError":true}`, ""},
		{"success mentioning EACCES", "s1", `{"content":[{"type":"text","text":"EACCES is errno 13"}]}`, ""},
		{"not enforced", "", eacces, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testProxy(t)
			p.enforced = tt.session
			req := message{JSONRPC: "2.0", ID: json.RawMessage(`7`), Method: "tools/call", Params: json.RawMessage(`{"name":"echo","arguments":{"text":"x"}}`)}
			out := p.call(context.Background(), req, func(context.Context) (message, error) {
				return message{JSONRPC: "2.0", ID: req.ID, Result: json.RawMessage(tt.result)}, nil
			}, nil)
			var resp struct {
				Result struct {
					IsError bool `json:"isError"`
					SC      struct {
						Class   string `json:"error_class"`
						Message string `json:"message"`
						Reason  string `json:"reason"`
					} `json:"structuredContent"`
				} `json:"result"`
			}
			if err := json.Unmarshal(out, &resp); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			if resp.Result.SC.Class != tt.class {
				t.Fatalf("class %q, want %q: %s", resp.Result.SC.Class, tt.class, out)
			}
			if tt.class != "" && (!resp.Result.IsError || resp.Result.SC.Reason != "kernel" ||
				!strings.Contains(resp.Result.SC.Message, "session "+tt.session+")") || !strings.Contains(resp.Result.SC.Message, "klock log -m MANIFEST "+tt.session)) {
				t.Fatalf("typed refusal does not say which session and where to look: %s", out)
			}
		})
	}
}

// TestKilledServerCallIsTyped: a strict session ends at its first
// violation, so the wall may kill the server before it answers; the call
// it leaves open gets tool_sandbox_violation with the violation, not
// tool_internal_error "upstream closed".
func TestKilledServerCallIsTyped(t *testing.T) {
	p := testProxy(t)
	p.enforced = "20260101T000000-abcdef"
	clientR, clientW := io.Pipe()
	outR, outW := io.Pipe()
	toServerR, toServerW := io.Pipe()
	fromServerR, fromServerW := io.Pipe()
	go func() {
		// The server reads the call; the wall kills it before it answers.
		bufio.NewReader(toServerR).ReadBytes('\n')
		p.ServerStopped("ScopeViolationError: Agent attempted CONSUMES on /srv/outside/secret.txt but declared nothing there")
		fromServerW.Close()
	}()
	done := make(chan error, 1)
	go func() { done <- p.ServeStdio(context.Background(), clientR, outW, toServerW, fromServerR) }()
	go io.WriteString(clientW, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`+"\n")
	line, err := bufio.NewReader(outR).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Result struct {
			SC struct {
				Class   string `json:"error_class"`
				Message string `json:"message"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if resp.Result.SC.Class != "tool_sandbox_violation" || !strings.Contains(resp.Result.SC.Message, "secret.txt") ||
		!strings.Contains(resp.Result.SC.Message, p.enforced) {
		t.Fatalf("a call cut short by the wall's kill: %s", line)
	}
	clientW.Close()
	outR.Close()
	<-done
}
