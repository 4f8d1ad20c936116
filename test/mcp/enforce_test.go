package mcp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

// TestEnforcedServer runs the filesystem server itself under kernel
// enforcement (klock mcp --enforce): a read inside the manifest's scope
// works; a read the contract allows but the manifest's intents do not
// (the tool has no path constraint) is stopped by the kernel, and the agent
// gets a typed error rather than the file.
func TestEnforcedServer(t *testing.T) {
	testutil.RequirePrivileged(t)
	server := npmBin(t, "mcp-server-filesystem")
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755) // the test's temp root is 0700
	root := filepath.Join(base, "w")
	writeFile(t, filepath.Join(root, "data", "in.txt"), "inside scope\n")
	writeFile(t, filepath.Join(root, "outside", "secret.txt"), "outside scope\n")
	// The server runs as nobody, the owner of the workdir.
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, 65534, 65534) })
	pkg := filepath.Join(here(), "node_modules")
	m := fmt.Sprintf(`apiVersion: klock/v1
agent: {id: enforced-%d}
mode: strict
workdir: %s
intents:
  - CONSUMES FILE:${workdir}/data/**
  - CONSUMES FILE:%s/**
  - CONSUMES FILE:/proc/sys/vm/overcommit_memory
  - PROVIDES PROC:/usr/bin/node
declared_tools:
  - {name: read_text_file, blast_radius: read, side_effects: READ, category: B, timeout_ms: 5000}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: {units: 1, currency: USD}, max_cost: {units: 2, currency: USD}}
hitl: {default_mode: HOTL}
`, time.Now().UnixNano(), root, pkg)
	mp := filepath.Join(base, "agent.yaml")
	writeFile(t, mp, m)
	node := "/usr/bin/node"
	if _, err := os.Stat(node); err != nil {
		testutil.Unavailable(t, "node is not at /usr/bin/node")
	}
	s := connect(t, "-m", mp, "--state-dir", t.TempDir(), "--enforce", "--", node, server, root)
	r := call(t, s, "read_text_file", map[string]any{"path": filepath.Join(root, "data", "in.txt")})
	if r.IsError || !strings.Contains(text(r), "inside scope") {
		t.Fatalf("enforced read in scope: %s", text(r))
	}
	r = call(t, s, "read_text_file", map[string]any{"path": filepath.Join(root, "outside", "secret.txt")})
	if strings.Contains(text(r), "outside scope") {
		t.Fatal("the enforced server read a file outside the manifest's scope")
	}
	// The wall's refusal is the typed error of seed 004, not the server's
	// raw EACCES text, and it names the session whose log has the block.
	e := refusal(t, r)
	if e.Class != "tool_sandbox_violation" || e.Reason != "kernel" || e.Retryable || !strings.Contains(e.Message, "klock log") {
		t.Fatalf("out-of-scope read: %+v, want tool_sandbox_violation (kernel) naming the session's log", e)
	}
	t.Logf("out-of-scope read: %s", e.Message)
}

// TestEnforceUserFlag: the message klock mcp --enforce gives when it cannot
// pick a user tells the user to pass --user, so --user exists there (and
// only there: without --enforce the server runs as the caller).
func TestEnforceUserFlag(t *testing.T) {
	mp := filepath.Join(t.TempDir(), "agent.yaml")
	writeFile(t, mp, `apiVersion: klock/v1
agent: {id: user-flag}
intents: ["CONSUMES FILE:/srv/**"]
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--enforce", "--user", "nobody"}, "want a numeric uid"},
		{[]string{"--user", "65534"}, "without --enforce"},
	} {
		args := append([]string{"mcp", "-m", mp, "--state-dir", t.TempDir()}, tt.args...)
		out, err := exec.Command(klockBin, append(args, "--", "/bin/true")...).CombinedOutput()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.Contains(string(out), tt.want) {
			t.Fatalf("klock %v: exit %d: %s (want exit 2 and %q)", tt.args, code, out, tt.want)
		}
	}
}
