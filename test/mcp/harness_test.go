package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/harness"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var klockBin string

func TestMain(m *testing.M) {
	// The gateways' tool calls lease in a store of the suite's own.
	if code, done := harness.InPrivateLeaseStore(); done {
		os.Exit(code)
	}
	dir, err := os.MkdirTemp("", "klock-mcp-test-")
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

// here is this package's directory (node_modules lives next to it).
func here() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Dir(f)
}

// npmBin returns the path of an installed npm package's binary, or marks the
// test unavailable (a failure under KLOCK_REQUIRE_PRIVILEGED=1).
func npmBin(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(here(), "node_modules", ".bin", name)
	if _, err := os.Stat(p); err != nil {
		testutil.Unavailable(t, name+" is not installed: run scripts/deps.sh npm (npm ci in test/mcp)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		testutil.Unavailable(t, "node is not installed")
	}
	return p
}

// connect starts `klock mcp` with args and connects the official Go SDK
// client to it over stdio.
func connect(t *testing.T, args ...string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.Command(klockBin, append([]string{"mcp"}, args...)...)
	cmd.Stderr = &testLog{t: t}
	client := mcp.NewClient(&mcp.Implementation{Name: "klock-test", Version: "1"}, nil)
	s, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to klock mcp: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Logf("klock mcp: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// typedError reads the typed error a refused call carries.
type typedError struct {
	OK         bool   `json:"ok"`
	Class      string `json:"error_class"`
	Retryable  bool   `json:"retryable"`
	Message    string `json:"message"`
	Reason     string `json:"reason"`
	ApprovalID string `json:"approval_id"`
}

func refusal(t *testing.T, r *mcp.CallToolResult) typedError {
	t.Helper()
	if !r.IsError {
		t.Fatalf("call was not refused: %+v", r.Content)
	}
	var e typedError
	raw, _ := json.Marshal(r.StructuredContent)
	if err := json.Unmarshal(raw, &e); err != nil || e.Class == "" {
		t.Fatalf("refusal without a typed error: %s", raw)
	}
	if e.OK {
		t.Fatalf("typed error has ok:true: %s", raw)
	}
	return e
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func call(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return r
}

// auditRecords reads the audit log's records.
func auditRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
