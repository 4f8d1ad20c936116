package mcp

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/audit"
)

// fsManifest declares four of the filesystem server's tools; writes are
// bound by pattern to root/data. trifecta adds the three trifecta flags.
func fsManifest(t *testing.T, root string, trifecta bool) string {
	t.Helper()
	data := regexp.QuoteMeta(filepath.Join(root, "data")) + "/.*"
	flag := func(s string) string {
		if trifecta {
			return s
		}
		return ""
	}
	m := fmt.Sprintf(`apiVersion: klock/v1
agent: {id: fs-agent-%d, version: 1.0.0}
mode: strict
workdir: %s
intents:
  - CONSUMES FILE:${workdir}/**
  - MUTATES FILE:${workdir}/data/**
  - PROVIDES FILE:${workdir}/data/**
declared_tools:
  - name: read_text_file
    type: read
    blast_radius: read
    category: B
    side_effects: READ
    %s
    input_schema:
      path: {type: string, pattern: '^%s$'}
  - name: list_directory
    type: read
    blast_radius: read
    category: B
    side_effects: READ
    %s
    input_schema:
      path: {type: string}
  - name: write_file
    type: write
    blast_radius: local
    category: B
    side_effects: REVERSIBLE-WRITE
    %s
    idempotency: {mode: natural}
    rollback: {mechanism: restore from the pre-flight backup, window: session, restores: the file}
    autonomy: {unsupervised: always}
    input_schema:
      path: {type: string, pattern: '^%s$'}
      content: {type: string, max_length: 100000}
  - name: edit_file
    type: write
    blast_radius: local
    category: B
    side_effects: REVERSIBLE-WRITE
    idempotency: {mode: key, key_source: "hash(path, edits)"}
    rollback: {mechanism: restore from the pre-flight backup, window: session, restores: the file}
    autonomy: {unsupervised: always}
    input_schema:
      path: {type: string, pattern: '^%s$'}
      edits: {type: array, min_length: 1}
      dryRun: {type: boolean, required: false}
cost_envelope:
  expected_tokens_in: 1000
  max_tokens_in: 2000
  expected_tokens_out: 100
  max_tokens_out: 200
  expected_latency_ms: 1000
  max_latency_ms: 5000
  context_efficiency: 0.7
  expected_cost: {units: 1, currency: USD}
  max_cost: {units: 5, currency: USD}
hitl: {default_mode: HOTL, approval_timeout_seconds: 60}
`, time.Now().UnixNano(), root, flag("untrusted_content: true"), data, flag("private_data_access: true"), flag("external_communication: true"), data, data)
	p := filepath.Join(t.TempDir(), "agent.yaml")
	writeFile(t, p, m)
	if out, err := exec.Command(klockBin, "validate", p).CombinedOutput(); err != nil {
		t.Fatalf("test manifest invalid: %s", out)
	}
	return p
}

func TestFilesystemServerBehindGateway(t *testing.T) {
	server := npmBin(t, "mcp-server-filesystem")
	root, _ := filepath.EvalSymlinks(t.TempDir())
	state := t.TempDir()
	writeFile(t, filepath.Join(root, "data", "hello.txt"), "hello from klock\n")
	writeFile(t, filepath.Join(root, "data", "count.txt"), "a")
	writeFile(t, filepath.Join(root, "outside", "secret.txt"), "do not touch\n")
	manifest := fsManifest(t, root, false)
	auditPath := filepath.Join(state, "audit.jsonl")
	// The server itself may reach all of root: the contract is what narrows it.
	s := connect(t, "-m", manifest, "--state-dir", state, "--audit", auditPath, "--", "node", server, root)

	t.Run("undeclared tools are invisible", func(t *testing.T) {
		res, err := s.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		slices.Sort(names)
		want := []string{"edit_file", "list_directory", "read_text_file", "write_file"}
		if !slices.Equal(names, want) {
			t.Fatalf("tools/list = %v, want exactly the declared %v", names, want)
		}
		// Calling one anyway is refused: it does not exist for this agent.
		e := refusal(t, call(t, s, "move_file", map[string]any{"source": filepath.Join(root, "data", "hello.txt"), "destination": filepath.Join(root, "outside", "x")}))
		if e.Class != "tool_capability_missing" || e.Retryable {
			t.Fatalf("undeclared tool: %+v", e)
		}
		if _, err := os.Stat(filepath.Join(root, "data", "hello.txt")); err != nil {
			t.Fatalf("the undeclared move happened: %v", err)
		}
	})

	t.Run("declared read works", func(t *testing.T) {
		r := call(t, s, "read_text_file", map[string]any{"path": filepath.Join(root, "data", "hello.txt")})
		if r.IsError || !strings.Contains(text(r), "hello from klock") {
			t.Fatalf("read: isError=%v text=%q", r.IsError, text(r))
		}
	})

	t.Run("write outside the contract is refused and audited", func(t *testing.T) {
		target := filepath.Join(root, "outside", "evil.txt")
		e := refusal(t, call(t, s, "write_file", map[string]any{"path": target, "content": "pwned"}))
		if e.Class != "tool_invalid_args" || e.Retryable || !strings.Contains(e.Message, "pattern") {
			t.Fatalf("refusal: %+v", e)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Fatalf("the refused write reached the disk: %v", err)
		}
		// An allowed write in scope lands.
		in := filepath.Join(root, "data", "ok.txt")
		if r := call(t, s, "write_file", map[string]any{"path": in, "content": "fine"}); r.IsError {
			t.Fatalf("in-scope write refused: %s", text(r))
		}
		if b, _ := os.ReadFile(in); string(b) != "fine" {
			t.Fatalf("in-scope write: file holds %q", b)
		}
		var found bool
		for _, r := range auditRecords(t, auditPath) {
			if r["tool"] == "write_file" && r["verdict"] == "deny" && r["result"] == "tool_invalid_args" &&
				strings.Contains(fmt.Sprint(r["args"]), "evil.txt") && r["check"] == "schema" {
				found = true
			}
		}
		if !found {
			t.Fatalf("no audit record of the refused write in %s", auditPath)
		}
		if n, err := audit.Verify(auditPath); err != nil || n < 3 {
			t.Fatalf("audit chain: %d lines, %v", n, err)
		}
	})

	t.Run("idempotent retry has one effect", func(t *testing.T) {
		p := filepath.Join(root, "data", "count.txt")
		args := map[string]any{"path": p, "edits": []any{map[string]any{"oldText": "a", "newText": "aa"}}}
		first := call(t, s, "edit_file", args)
		if first.IsError {
			t.Fatalf("edit: %s", text(first))
		}
		second := call(t, s, "edit_file", args) // the agent retries
		if second.IsError || text(second) != text(first) {
			t.Fatalf("retry got a different result:\n%s\nvs\n%s", text(second), text(first))
		}
		if b, _ := os.ReadFile(p); string(b) != "aa" {
			t.Fatalf("after an edit and its retry the file holds %q, want \"aa\" (one effect)", b)
		}
		var replays int
		for _, r := range auditRecords(t, auditPath) {
			if r["tool"] == "edit_file" && r["verdict"] == "replay" {
				replays++
			}
		}
		if replays != 1 {
			t.Fatalf("audit shows %d replays of edit_file, want 1", replays)
		}
	})

	t.Run("klock tools disable changes the running gateway", func(t *testing.T) {
		socks, _ := filepath.Glob(filepath.Join(state, "gateway", "*", "control.sock"))
		if len(socks) != 1 {
			t.Fatalf("control sockets: %v", socks)
		}
		if out, err := exec.Command(klockBin, "tools", "disable", "--socket", socks[0], "write_file", "--reason", "incident 7").CombinedOutput(); err != nil {
			t.Fatalf("klock tools disable: %v: %s", err, out)
		}
		res, err := s.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range res.Tools {
			if tool.Name == "write_file" {
				t.Fatal("a disabled tool is still listed")
			}
		}
		e := refusal(t, call(t, s, "write_file", map[string]any{"path": filepath.Join(root, "data", "ok.txt"), "content": "again"}))
		if e.Class != "tool_restricted" || !strings.Contains(e.Message, "incident 7") {
			t.Fatalf("disabled tool: %+v", e)
		}
		if err := exec.Command(klockBin, "tools", "disable", "--socket", socks[0], "no_such_tool").Run(); err == nil {
			t.Fatal("disabling an undeclared tool succeeded")
		}
	})
}

func TestTrifectaCallWaitsForApproval(t *testing.T) {
	server := npmBin(t, "mcp-server-filesystem")
	root, _ := filepath.EvalSymlinks(t.TempDir())
	state := t.TempDir()
	writeFile(t, filepath.Join(root, "data", "in.txt"), "x")
	manifest := fsManifest(t, root, true)
	s := connect(t, "-m", manifest, "--state-dir", state, "--", "node", server, root)

	// A READ without external communication is not gated.
	if r := call(t, s, "read_text_file", map[string]any{"path": filepath.Join(root, "data", "in.txt")}); r.IsError {
		t.Fatalf("read under trifecta: %s", text(r))
	}
	target := filepath.Join(root, "data", "out.txt")
	done := make(chan string, 1)
	go func() {
		r := call(t, s, "write_file", map[string]any{"path": target, "content": "approved"})
		done <- fmt.Sprintf("%v %s", r.IsError, text(r))
	}()
	id := waitPending(t, state, "write_file")
	select {
	case got := <-done:
		t.Fatalf("the call returned before approval: %s", got)
	default:
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatal("the write happened before approval")
	}
	if out, err := exec.Command(klockBin, "approve", id, "--state-dir", state).CombinedOutput(); err != nil {
		t.Fatalf("klock approve: %v: %s", err, out)
	}
	select {
	case got := <-done:
		if !strings.HasPrefix(got, "false") {
			t.Fatalf("approved call: %s", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the approved call did not proceed")
	}
	if b, _ := os.ReadFile(target); string(b) != "approved" {
		t.Fatalf("after approval the file holds %q", b)
	}
	// A second approval of the same request is refused: exit status 1.
	if err := exec.Command(klockBin, "approve", id, "--state-dir", state).Run(); err == nil {
		t.Fatal("approving a decided request succeeded")
	}

	// A denial reaches the agent as a typed result.
	go func() {
		r := call(t, s, "write_file", map[string]any{"path": target, "content": "denied"})
		raw, _ := json.Marshal(r.StructuredContent)
		done <- string(raw)
	}()
	id = waitPending(t, state, "write_file")
	if out, err := exec.Command(klockBin, "deny", id, "--state-dir", state, "--note", "not today").CombinedOutput(); err != nil {
		t.Fatalf("klock deny: %v: %s", err, out)
	}
	got := <-done
	if !strings.Contains(got, `"error_class":"tool_restricted"`) || !strings.Contains(got, "approval_denied") || !strings.Contains(got, "not today") {
		t.Fatalf("denied call: %s", got)
	}
	if b, _ := os.ReadFile(target); string(b) != "approved" {
		t.Fatalf("the denied write happened: %q", b)
	}
}

// waitPending polls klock approvals until a pending request for tool shows.
func waitPending(t *testing.T, state, tool string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		out, err := exec.Command(klockBin, "approvals", "--json", "--state-dir", state).Output()
		if err != nil {
			t.Fatalf("klock approvals: %v", err)
		}
		var list []struct{ ID, Tool, State string }
		if err := json.Unmarshal(out, &list); err != nil {
			t.Fatalf("klock approvals --json: %v: %s", err, out)
		}
		for _, r := range list {
			if r.Tool == tool && r.State == "pending" {
				return r.ID
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no pending approval for %s", tool)
	return ""
}
