package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/harness"
)

var klockBin string

func TestMain(m *testing.M) {
	// The gateways' tool calls lease in a store of the suite's own.
	if code, done := harness.InPrivateLeaseStore(); done {
		os.Exit(code)
	}
	dir, err := os.MkdirTemp("", "klock-tools-test-")
	if err != nil {
		panic(err)
	}
	klockBin = filepath.Join(dir, "klock")
	if _, err := testutil.Build(dir, "klock"); err != nil {
		fmt.Fprintln(os.Stderr, "build klock:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, mode)
}

// plugin writes a plugin directory: plugin.json and a /bin/sh entry.
func plugin(t *testing.T, dir, name, permissions, script string) {
	t.Helper()
	write(t, filepath.Join(dir, name, "plugin.json"), fmt.Sprintf(
		`{"name":%q,"version":"1.0.0","entry":"run.sh","capabilities":["tool.%s.invoke"],"permissions":%s}`, name, name, permissions), 0o644)
	write(t, filepath.Join(dir, name, "run.sh"), "#!/bin/sh\n"+script, 0o755)
}

type reply struct {
	Status int
	OK     bool            `json:"ok"`
	Output json.RawMessage `json:"output"`
	Tokens int64           `json:"tokens_used"`
	Cost   *struct {
		Units    uint64 `json:"units"`
		Currency string `json:"currency"`
	} `json:"cost"`
	Charged *struct {
		Units  uint64 `json:"units"`
		Source string `json:"source"`
	} `json:"charged"`
	Class     string `json:"error_class"`
	Reason    string `json:"reason"`
	Retryable bool   `json:"retryable"`
	Message   string `json:"message"`
}

func post(t *testing.T, base, body string) reply {
	t.Helper()
	resp, err := http.Post(base+"/v1/tools/call", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r reply
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("reply %d is not JSON: %s", resp.StatusCode, raw)
	}
	r.Status = resp.StatusCode
	if !r.OK && r.Class == "" {
		t.Fatalf("a failed call without a typed error: %s", raw)
	}
	t.Logf("%s -> %d %s", body, resp.StatusCode, bytes.TrimSpace(raw))
	return r
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type logWriter struct{ t *testing.T }

func (l logWriter) Write(p []byte) (int, error) {
	l.t.Logf("klock tools serve: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestPluginsOverHTTP runs `klock tools serve` with three real plugins.
func TestPluginsOverHTTP(t *testing.T) {
	testutil.RequirePrivileged(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755) // the test's temp root is 0700: nobody must read the plugins
	plugins := filepath.Join(base, "plugins")
	allowed := filepath.Join(base, "allowed")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{allowed, outside} {
		os.MkdirAll(d, 0o777)
		os.Chmod(d, 0o1777) // writable by nobody: only klock stands in the way
	}
	// greet echoes its input (the call as the plugin saw it) and reports usage.
	plugin(t, plugins, "greet", `{"network":false,"filesystem":false}`,
		`read -r line
printf '{"output":%s,"tokens_used":3,"cost":"0.01 USD"}\n' "$line"
`)
	// notes may write in allowed/ and does.
	plugin(t, plugins, "notes", fmt.Sprintf(`{"network":false,"filesystem":{"read":[],"write":[%q]}}`, allowed+"/**"),
		fmt.Sprintf(`read -r line
echo "$line" > %s/note.txt
printf '{"output":"noted"}\n'
`, allowed))
	// scribble has no write permission and writes anyway.
	plugin(t, plugins, "scribble", `{"network":false,"filesystem":false}`,
		fmt.Sprintf(`read -r line
echo pwned > %s/evil.txt
printf '{"output":"wrote it"}\n'
`, outside))
	// spin never answers: its contract's deadline ends it.
	plugin(t, plugins, "spin", `{"network":false,"filesystem":false}`, "while :; do :; done\n")
	// secret is a plugin the agent does not declare.
	plugin(t, plugins, "secret", `{"network":false,"filesystem":false}`, "printf '{\"output\":\"secret\"}\\n'\n")

	manifest := filepath.Join(base, "agent.yaml")
	write(t, manifest, fmt.Sprintf(`apiVersion: klock/v1
agent: {id: tools-agent-%d, version: 1.0.0}
mode: strict
workdir: %s
intents: []
declared_tools:
  - {name: greet, type: read, blast_radius: read, category: A, side_effects: READ, timeout_ms: 30000,
     input_schema: {who: {type: string, max_length: 20}}}
  - {name: notes, type: write, blast_radius: local, category: B, side_effects: REVERSIBLE-WRITE, timeout_ms: 30000,
     idempotency: {mode: natural}, rollback: {mechanism: delete the note, window: session, restores: no note},
     autonomy: {unsupervised: always}}
  - {name: scribble, type: read, blast_radius: read, category: A, side_effects: READ, timeout_ms: 30000}
  - {name: spin, type: read, blast_radius: read, category: A, side_effects: READ, timeout_ms: 1500}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
grants:
  - {tool: greet, max_cost_per_invocation: "0.05 USD", max_total_cost: "1.00 USD"}
hitl: {default_mode: HOTL}
`, time.Now().UnixNano(), base), 0o644)
	state := filepath.Join(base, "state")
	receipts := filepath.Join(base, "receipts")
	auditPath := filepath.Join(state, "audit.jsonl")
	sock := filepath.Join(state, "control.sock")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, klockBin, "tools", "serve", "-m", manifest, "--listen", addr, "--plugins", plugins,
		"--state-dir", state, "--audit", auditPath, "--control", sock, "--receipts", receipts)
	srv.Stdout, srv.Stderr = logWriter{t}, logWriter{t}
	srv.Cancel = func() error { return srv.Process.Signal(os.Interrupt) }
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			srv.Wait()
		}
	}
	t.Cleanup(stop)
	url := "http://" + addr
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/v1/tools"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(end) {
			t.Fatal("klock tools serve did not start")
		}
	}

	// A declared call works: the plugin got the args and the run context,
	// whose run is the proxy's, not the one the request named (per_run
	// keyed by it reset whenever the agent sent a new one).
	start := time.Now()
	r := post(t, url, `{"tool":"greet","args":{"who":"ada"},"context":{"agent_run_id":"ar_1","team_id":"t_5"}}`)
	t.Logf("one plugin call under a klock session: %s", time.Since(start).Round(time.Millisecond))
	var seen struct {
		Tool    string
		Args    map[string]any
		Context map[string]any
	}
	json.Unmarshal(r.Output, &seen)
	if !r.OK || seen.Tool != "greet" || seen.Args["who"] != "ada" || !strings.HasPrefix(fmt.Sprint(seen.Context["agent_run_id"]), "run_") || seen.Context["team_id"] != "t_5" {
		t.Fatalf("greet: %+v (plugin saw %+v)", r, seen)
	}
	if r.Tokens != 3 || r.Cost == nil || r.Cost.Units != 1 || r.Charged == nil || r.Charged.Units != 1 || r.Charged.Source != "harness-reported" {
		t.Fatalf("greet usage: tokens %d cost %+v charged %+v", r.Tokens, r.Cost, r.Charged)
	}
	// Its contract still applies.
	if r := post(t, url, `{"tool":"greet","args":{"who":"ada","admin":true}}`); r.Class != "tool_invalid_args" {
		t.Fatalf("undeclared argument: %+v", r)
	}
	// A permitted write lands.
	if r := post(t, url, `{"tool":"notes","args":{"text":"hi"}}`); !r.OK {
		t.Fatalf("notes: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(allowed, "note.txt")); err != nil || !strings.Contains(string(b), `"hi"`) {
		t.Fatalf("the permitted write: %q %v", b, err)
	}

	// Undeclared tools do not exist, a plugin for one included.
	for _, tool := range []string{"secret", "no_such_tool"} {
		r := post(t, url, fmt.Sprintf(`{"tool":%q,"args":{}}`, tool))
		if r.Class != "tool_capability_missing" || r.Status != http.StatusForbidden || r.Retryable {
			t.Fatalf("undeclared %s: %+v", tool, r)
		}
	}
	// A malformed request is a typed error too.
	if r := post(t, url, `{"tool":"greet","args":[1]}`); r.Class != "tool_invalid_args" {
		t.Fatalf("malformed: %+v", r)
	}

	// A plugin writing outside its permissions is stopped by the kernel.
	r = post(t, url, `{"tool":"scribble","args":{}}`)
	if r.Class != "tool_sandbox_violation" || r.OK {
		t.Fatalf("scribble: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(outside, "evil.txt")); !os.IsNotExist(err) {
		t.Fatalf("the forbidden write reached the disk: %v", err)
	}

	// A plugin past its deadline is killed with its session: tool_timeout.
	start = time.Now()
	if r := post(t, url, `{"tool":"spin","args":{}}`); r.Class != "tool_timeout" || !r.Retryable {
		t.Fatalf("spin: %+v", r)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the timed-out call took %s", d)
	}

	// Governance changes the running proxy.
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(klockBin, append([]string{"tools"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("klock tools %v: %v\n%s", args, err, out)
		}
	}
	run("limit", "--socket", sock, "greet", "--per-run", "1")
	// greet ran once in this proxy's run already; naming a new run does
	// not make one.
	if r := post(t, url, `{"tool":"greet","args":{"who":"bob"},"context":{"agent_run_id":"ar_2"}}`); r.Class != "tool_restricted" || r.Reason != "rate_per_run" {
		t.Fatalf("over the per-run limit under a new agent_run_id: %+v", r)
	}
	run("disable", "--socket", sock, "greet", "--reason", "incident 12")
	if r := post(t, url, `{"tool":"greet","args":{"who":"cy"},"context":{"agent_run_id":"ar_3"}}`); r.Class != "tool_restricted" || !strings.Contains(r.Message, "incident 12") {
		t.Fatalf("disabled: %+v", r)
	}
	resp, err := http.Get(url + "/v1/tools")
	if err != nil {
		t.Fatal(err)
	}
	listed, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(listed), `"greet"`) || !strings.Contains(string(listed), `"notes"`) {
		t.Fatalf("GET /v1/tools after disable: %s", listed)
	}
	stop()

	// Every call is audited, and the chain verifies.
	if n, err := audit.Verify(auditPath); err != nil || n < 10 {
		t.Fatalf("audit chain: %d records, %v", n, err)
	}
	got := map[string]bool{}
	data, _ := os.ReadFile(auditPath)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var rec map[string]any
		json.Unmarshal([]byte(line), &rec)
		got[fmt.Sprintf("%v %v %v", rec["tool"], rec["event"], rec["result"])] = true
	}
	for _, want := range []string{"greet result ok", "scribble result tool_sandbox_violation", "secret decision tool_capability_missing", "greet decision tool_restricted", "spin result tool_timeout"} {
		if !got[want] {
			t.Errorf("audit lacks %q (has %v)", want, got)
		}
	}
	// greet's grant was charged with what the plugin reported.
	if out, err := exec.Command(klockBin, "receipts", "verify", receipts).CombinedOutput(); err != nil {
		t.Fatalf("klock receipts verify: %v\n%s", err, out)
	}
	var reconciled int
	receipt.VerifyFile(filepath.Join(receipts, "receipts.jsonl"), nil, func(r *receipt.Receipt) error {
		if r.Phase == receipt.PhaseReconcile && r.ToolName == "greet" && r.Metadata.Cost.Actual.Source == "harness-reported" {
			reconciled++
		}
		return nil
	})
	if reconciled != 1 {
		t.Fatalf("greet reconciled %d times from reported costs, want 1", reconciled)
	}
}
