package mcp

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// permServer is an MCP server (node, no packages) that says what reached
// it: whoami answers with the _meta klock/acts_as it received, open with
// the file it was asked for, send with how many sends it has done.
const permServer = `const rl = require('readline').createInterface({input: process.stdin});
let sent = 0;
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  let r = {};
  if (m.method === 'initialize') r = {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: 'perm', version: '1'}};
  if (m.method === 'tools/list') r = {tools: ['whoami', 'open', 'send'].map((n) => ({name: n, inputSchema: {type: 'object'}}))};
  if (m.method === 'tools/call') {
    const meta = m.params._meta || {};
    let text = '';
    if (m.params.name === 'whoami') text = 'acts_as=' + (meta['klock/acts_as'] === undefined ? '(none)' : meta['klock/acts_as']);
    if (m.params.name === 'open') text = 'opened ' + m.params.arguments.file;
    if (m.params.name === 'send') { sent++; text = 'sent ' + sent; }
    r = {content: [{type: 'text', text: text}]};
  }
  process.stdout.write(JSON.stringify({jsonrpc: '2.0', id: m.id, result: r}) + '\n');
});
`

// permSetup writes the server and the manifest into a new directory:
// it returns the directory and the manifest.
func permSetup(t *testing.T) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		testutil.Unavailable(t, "node is not installed")
	}
	base, _ := filepath.EvalSymlinks(t.TempDir())
	writeFile(t, filepath.Join(base, "perm.js"), permServer)
	return base, permManifest(t, base)
}

// permConnect starts klock mcp over the server permSetup wrote.
func permConnect(t *testing.T, base, manifest string, extra ...string) *mcp.ClientSession {
	t.Helper()
	args := append([]string{"-m", manifest, "--state-dir", filepath.Join(base, "state"), "--control", filepath.Join(base, "c.sock")}, extra...)
	return connect(t, append(args, "--", "node", filepath.Join(base, "perm.js"))...)
}

func permManifest(t *testing.T, base string) string {
	t.Helper()
	manifest := filepath.Join(base, "agent.yaml")
	writeFile(t, manifest, fmt.Sprintf(`apiVersion: klock/v1
agent: {id: perm-%d, version: 1.0.0}
mode: strict
workdir: %s
intents: []
declared_tools:
  - {name: whoami, type: read, blast_radius: read, category: B, side_effects: READ, permission: {acts_as: "svc-support, customer-bound"}}
  - name: open
    type: read
    blast_radius: read
    category: B
    side_effects: READ
    permission:
      scope: "${workdir}/**"
      forbidden: ["${workdir}/secret/**", "file=*.pem"]
  - {name: send, type: write, blast_radius: domain, category: B, side_effects: REVERSIBLE-WRITE, rollback: {mechanism: recall the message by hand, window: 1h}, idempotency: {mode: none}, autonomy: {unsupervised: always}}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`, time.Now().UnixNano()%1e6, filepath.Join(base, "ws")))
	return manifest
}

// TestPermissionOnTheWire: seed 002's permission through klock mcp to a
// real MCP server. The declared acts_as reaches the server in _meta
// (klock/acts_as), replacing the one the client claimed; a tool that
// declares none receives none. open's scope and forbidden are held where
// its file argument leads: a forbidden directory, reached directly, through
// a symlink or as a file:// URI, and a path outside the scope are refused
// with tool_restricted naming the field and the argument, before the
// server sees them.
func TestPermissionOnTheWire(t *testing.T) {
	base, manifest := permSetup(t)
	ws := filepath.Join(base, "ws")
	writeFile(t, filepath.Join(ws, "notes.txt"), "n\n")
	writeFile(t, filepath.Join(ws, "secret", "key"), "k\n")
	if err := os.Symlink(filepath.Join(ws, "secret"), filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	s := permConnect(t, base, manifest)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Meta: mcp.Meta{"klock/acts_as": "root", "progressToken": "p1"}})
	if err != nil || r.IsError || text(r) != "acts_as=svc-support, customer-bound" {
		t.Fatalf("whoami: %v %s", err, text(r))
	}
	if got := text(call(t, s, "open", map[string]any{"file": filepath.Join(ws, "notes.txt")})); got != "opened "+filepath.Join(ws, "notes.txt") {
		t.Fatalf("open inside scope: %s", got)
	}
	r, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "open", Arguments: map[string]any{"file": filepath.Join(ws, "notes.txt")}, Meta: mcp.Meta{"klock/acts_as": "root"}})
	if err != nil || r.IsError {
		t.Fatalf("open with a claimed identity: %v %s", err, text(r))
	}
	for _, tc := range []struct{ file, reason, field string }{
		{filepath.Join(ws, "secret", "key"), "permission_forbidden", "permission.forbidden"},
		{filepath.Join(ws, "link", "key"), "permission_forbidden", "permission.forbidden"},
		{"file://" + filepath.Join(ws, "secret", "key"), "permission_forbidden", "permission.forbidden"},
		{filepath.Join(ws, "notes", "..", "secret", "key"), "permission_forbidden", "permission.forbidden"},
		{filepath.Join(ws, "server.pem"), "permission_forbidden", `"file=*.pem" of permission.forbidden`},
		{"/etc/hostname", "permission_scope", "permission.scope"},
	} {
		e := refusal(t, call(t, s, "open", map[string]any{"file": tc.file}))
		if e.Class != "tool_restricted" || e.Reason != tc.reason || !strings.Contains(e.Message, tc.field) || !strings.Contains(e.Message, `argument "file"`) {
			t.Errorf("open %s: %+v; want tool_restricted %s naming %s and the argument", tc.file, e, tc.reason, tc.field)
		}
	}
}

// TestPermissionUnsentWithoutActsAs: a tool whose contract declares no
// acts_as receives no identity, even one the client wrote in _meta.
func TestPermissionUnsentWithoutActsAs(t *testing.T) {
	base, manifest := permSetup(t)
	data, _ := os.ReadFile(manifest)
	writeFile(t, manifest, strings.Replace(string(data), `, permission: {acts_as: "svc-support, customer-bound"}`, "", 1))
	s := permConnect(t, base, manifest)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Meta: mcp.Meta{"klock/acts_as": "root"}})
	if err != nil || r.IsError || text(r) != "acts_as=(none)" {
		t.Fatalf("whoami without a declared identity: %v %s", err, text(r))
	}
}

// TestNonIdempotentRetryNeedsApproval: send (idempotency none) with the
// same arguments a second time in the run is not sent: it waits for a
// human (tool_restricted approval_pending, naming the retry). klock
// approve lets exactly that repeat through; other arguments pass, and the
// next repeat asks again, also after the gateway restarts in the same run.
func TestNonIdempotentRetryNeedsApproval(t *testing.T) {
	base, manifest := permSetup(t)
	state := filepath.Join(base, "state")
	s := permConnect(t, base, manifest, "--approval-wait", "200ms", "--run-id", "run-1")
	msg := map[string]any{"to": "ada", "body": "hello"}
	if got := text(call(t, s, "send", msg)); got != "sent 1" {
		t.Fatalf("first send: %s", got)
	}
	// The same arguments in another order are the same call.
	e := refusal(t, call(t, s, "send", map[string]any{"body": "hello", "to": "ada"}))
	if e.Class != "tool_restricted" || e.Reason != "approval_pending" || e.ApprovalID == "" || !strings.Contains(e.Message, "not idempotent") {
		t.Fatalf("the repeat: %+v; want tool_restricted approval_pending naming the retry", e)
	}
	if got := text(call(t, s, "send", map[string]any{"to": "bob", "body": "hello"})); got != "sent 2" {
		t.Fatalf("another recipient: %s", got)
	}
	if out, err := exec.Command(klockBin, "approve", e.ApprovalID, "--state-dir", state).CombinedOutput(); err != nil {
		t.Fatalf("klock approve: %v: %s", err, out)
	}
	if got := text(call(t, s, "send", msg)); got != "sent 3" {
		t.Fatalf("the approved repeat: %s", got)
	}
	e = refusal(t, call(t, s, "send", msg))
	if e.Reason != "approval_pending" || e.ApprovalID == "" {
		t.Fatalf("a third send with the same arguments: %+v; want a new approval request", e)
	}
	s.Close()
	s = permConnect(t, base, manifest, "--approval-wait", "200ms", "--run-id", "run-1")
	if e := refusal(t, call(t, s, "send", map[string]any{"to": "bob", "body": "hello"})); e.Reason != "approval_pending" {
		t.Fatalf("bob's repeat after a restart: %+v; want it held for approval", e)
	}
}

// TestValidateRefusesProsePermission: klock validate refuses a forbidden
// entry it could not check, located at the entry.
func TestValidateRefusesProsePermission(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	manifest := permManifest(t, base)
	data, _ := os.ReadFile(manifest)
	writeFile(t, manifest, strings.Replace(string(data), `forbidden: ["${workdir}/secret/**", "file=*.pem"]`, `forbidden: "payouts, ${workdir}/secret/**"`, 1))
	out, err := exec.Command(klockBin, "validate", manifest).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "agent.yaml:15:18: declared_tools[1].permission.forbidden[0]") || !strings.Contains(string(out), `"payouts"`) ||
		strings.Contains(string(out), "forbidden[1]") {
		t.Fatalf("klock validate: %v\n%s", err, out)
	}
}

// permHTTPServer is permServer over streamable HTTP (JSON answers, no
// session): whoami also says what Klock-Acts-As header reached it.
const permHTTPServer = `const http = require('http');
http.createServer((req, res) => {
  if (req.method !== 'POST') { res.writeHead(405); res.end(); return; }
  let body = '';
  req.on('data', (c) => { body += c; });
  req.on('end', () => {
    const m = JSON.parse(body);
    if (m.id === undefined) { res.writeHead(202); res.end(); return; }
    let r = {};
    if (m.method === 'initialize') r = {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: 'perm', version: '1'}};
    if (m.method === 'tools/list') r = {tools: [{name: 'whoami', inputSchema: {type: 'object'}}]};
    if (m.method === 'tools/call') {
      const meta = m.params._meta || {};
      r = {content: [{type: 'text', text: 'acts_as=' + (meta['klock/acts_as'] || '(none)') + ' header=' + (req.headers['klock-acts-as'] || '(none)')}]};
    }
    res.writeHead(200, {'Content-Type': 'application/json'});
    res.end(JSON.stringify({jsonrpc: '2.0', id: m.id, result: r}));
  });
}).listen(parseInt(process.argv[2], 10), '127.0.0.1');
`

// TestActsAsOverStreamableHTTP: through klock mcp --listen --upstream the
// declared identity reaches the server in _meta and in the Klock-Acts-As
// header, whatever header and _meta the client sent.
func TestActsAsOverStreamableHTTP(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		testutil.Unavailable(t, "node is not installed")
	}
	base, _ := filepath.EvalSymlinks(t.TempDir())
	writeFile(t, filepath.Join(base, "perm-http.js"), permHTTPServer)
	up, px := freePort(t), freePort(t)
	start(t, exec.Command("node", filepath.Join(base, "perm-http.js"), fmt.Sprint(up)))
	waitPort(t, up)
	start(t, exec.Command(klockBin, "mcp", "-m", permManifest(t, base), "--state-dir", filepath.Join(base, "state"), "--control", filepath.Join(base, "c.sock"),
		"--listen", fmt.Sprintf("127.0.0.1:%d", px), "--upstream", fmt.Sprintf("http://127.0.0.1:%d/mcp", up)))
	waitPort(t, px)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hc := &http.Client{Transport: claimTransport{}}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "klock-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", px), HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Meta: mcp.Meta{"klock/acts_as": "root"}})
	if err != nil || r.IsError || text(r) != "acts_as=svc-support, customer-bound header=svc-support, customer-bound" {
		t.Fatalf("whoami over HTTP: %v %s", err, text(r))
	}
}

// claimTransport is a client that claims an identity in every request's
// header.
type claimTransport struct{}

func (claimTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Klock-Acts-As", "root")
	return http.DefaultTransport.RoundTrip(r)
}
