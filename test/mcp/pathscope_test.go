package mcp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFilesystemPathWithin: the real filesystem server, allowed all of
// root, behind a contract that confines its path arguments to root/data
// with type path. Every way out (.., //, a link that leaves, a file to be
// created through such a link) is refused before the server sees it, and
// the in-scope calls still work. With docs/gateway.md's old ^/srv/data/ pattern
// the first of these read outside/secret.txt.
func TestFilesystemPathWithin(t *testing.T) {
	server := npmBin(t, "mcp-server-filesystem")
	root, _ := filepath.EvalSymlinks(t.TempDir())
	data := filepath.Join(root, "data")
	writeFile(t, filepath.Join(data, "hello.txt"), "hello\n")
	writeFile(t, filepath.Join(root, "outside", "secret.txt"), "secret\n")
	if err := os.Symlink("../outside", filepath.Join(data, "out")); err != nil {
		t.Fatal(err)
	}
	m := fmt.Sprintf(`apiVersion: klock/v1
agent: {id: fs-within-%d}
workdir: %s
intents: ["CONSUMES FILE:${workdir}/**"]
declared_tools:
  - name: read_text_file
    blast_radius: read
    side_effects: READ
    input_schema:
      path: {type: path, within: ["${workdir}/data"]}
  - name: write_file
    blast_radius: local
    side_effects: REVERSIBLE-WRITE
    rollback: {mechanism: restore from the pre-flight backup}
    autonomy: {unsupervised: always}
    input_schema:
      path: {type: path, within: ["${workdir}/data"]}
      content: {type: string}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`, time.Now().UnixNano(), root)
	mp := filepath.Join(t.TempDir(), "agent.yaml")
	writeFile(t, mp, m)
	if out, err := exec.Command(klockBin, "validate", mp).CombinedOutput(); err != nil {
		t.Fatalf("klock validate: %v: %s", err, out)
	}
	s := connect(t, "-m", mp, "--state-dir", t.TempDir(), "--", "node", server, root)

	for _, p := range []string{
		data + "/../outside/secret.txt",
		data + "//../outside/secret.txt",
		data + "/./../outside/secret.txt",
		data + "/out/secret.txt",
		data + "/..",
	} {
		r := call(t, s, "read_text_file", map[string]any{"path": p})
		if strings.Contains(text(r), "secret") && !strings.Contains(text(r), "error_class") {
			t.Fatalf("read %s returned the secret: %s", p, text(r))
		}
		if e := refusal(t, r); e.Class != "tool_invalid_args" || e.Reason != "path_outside" {
			t.Fatalf("read %s: %+v, want tool_invalid_args path_outside", p, e)
		}
	}
	e := refusal(t, call(t, s, "write_file", map[string]any{"path": data + "/out/new.txt", "content": "x"}))
	if e.Reason != "path_outside" {
		t.Fatalf("write through a link that leaves: %+v", e)
	}
	if _, err := os.Stat(filepath.Join(root, "outside", "new.txt")); !os.IsNotExist(err) {
		t.Fatalf("the refused write reached the disk: %v", err)
	}
	if r := call(t, s, "read_text_file", map[string]any{"path": data + "/./hello.txt"}); r.IsError || !strings.Contains(text(r), "hello") {
		t.Fatalf("in-scope read: %s", text(r))
	}
	if r := call(t, s, "write_file", map[string]any{"path": data + "/new/../made.txt", "content": "ok"}); r.IsError {
		t.Fatalf("in-scope write: %s", text(r))
	}

	// The old way: klock validate says what a pattern cannot do.
	old := strings.ReplaceAll(m, `{type: path, within: ["${workdir}/data"]}`, `{type: string, pattern: "^`+data+`/"}`)
	writeFile(t, mp, old)
	out, err := exec.Command(klockBin, "validate", mp).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "type: path") {
		t.Fatalf("klock validate of a ^/dir/ pattern: %v: %s (want a warning naming type: path)", err, out)
	}
}
