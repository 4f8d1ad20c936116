package mcpproxy

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/klocklabs/klock/guard/toolerr"
)

// WithEnforcedSession says the server runs as klock session id under the
// kernel wall (klock mcp --enforce). A tool error that reports a refused
// permission (EACCES, EPERM) is then the wall's doing as far as the agent
// can tell: it becomes a typed tool_sandbox_violation naming the session,
// not the server's raw errno text, which an agent reads as a retryable
// file-system hiccup. The session's log says exactly what was blocked.
func WithEnforcedSession(id string) Option { return func(p *Proxy) { p.enforced = id } }

// permissionRe matches how servers report a refused permission: Node's
// "EACCES: permission denied, open '/x'", Python's "[Errno 13] Permission
// denied", Go's "operation not permitted", errno names in JSON.
var permissionRe = regexp.MustCompile(`\b(EACCES|EPERM)\b|(?i:permission denied|operation not permitted)`)

// wallRefusal returns the typed error for a tool error result of an
// enforced server that reports a refused permission, else nil.
func (p *Proxy) wallRefusal(tool string, result json.RawMessage) *toolerr.Error {
	if p.enforced == "" {
		return nil
	}
	msg := resultText(result)
	if !permissionRe.MatchString(msg) {
		return nil
	}
	return toolerr.New(toolerr.SandboxViolation, "kernel",
		"%s: the tool was refused an operation (%s) while its server runs behind klock's kernel wall (klock mcp --enforce, session %s), "+
			"which refuses what the manifest's intents do not declare; `klock log -m MANIFEST %s` lists what it blocked; declare it in the intents if the tool needs it",
		tool, strings.TrimSpace(msg), p.enforced, p.enforced)
}

// resultText joins a CallToolResult's text content (the server's message).
func resultText(result json.RawMessage) string {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(result, &r) != nil {
		return ""
	}
	var b strings.Builder
	for _, c := range r.Content {
		if c.Type == "text" {
			if b.Len() > 0 {
				b.WriteString("; ")
			}
			b.WriteString(c.Text)
		}
	}
	s := b.String()
	if len(s) > 512 {
		s = strings.ToValidUTF8(s[:509], "") + "..."
	}
	return s
}

// ServerStopped records that klock's kernel wall killed the enforced
// server (a strict session ends at its first violation): the calls it
// leaves unanswered get this typed error instead of "upstream closed".
// Call it before closing the server's output, so that every call the
// closed stream ends already sees it.
func (p *Proxy) ServerStopped(violation string) {
	p.stopped.Store(toolerr.New(toolerr.SandboxViolation, "kernel",
		"the tool's server broke the manifest's scope and klock's kernel wall stopped it (klock mcp --enforce, session %s): %s; "+
			"the session was killed and its changes rolled back; `klock log -m MANIFEST %s` has the record; declare it in the intents if the tool needs it",
		p.enforced, violation, p.enforced))
}

// closedErr is why a dispatched call got no answer from a closed server.
func (p *Proxy) closedErr() error {
	if e := p.stopped.Load(); e != nil {
		c := *e // each call's error is its own (the gateway sets its Check)
		return &c
	}
	return errClosed
}
