package mcp

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// conformanceTools are the tools the conformance suite and server-everything
// use: the manifest declares them all (READ, unsupervised), so the proxy's
// checks pass and what is measured is its protocol fidelity.
var conformanceTools = []string{
	// server-everything 2026.8.31
	"echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference", "get-roots-list",
	"get-structured-content", "get-sum", "get-tiny-image", "gzip-file-as-resource", "toggle-simulated-logging",
	"toggle-subscriber-updates", "trigger-elicitation-request", "trigger-elicitation-request-async",
	"trigger-long-running-operation", "trigger-sampling-request", "trigger-sampling-request-async", "trigger-url-elicitation",
	// the suite's own scenario tools (conformance 0.1.13)
	"test_audio_content", "test_client_elicitation_defaults", "test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums",
	"test_elicitation", "test_embedded_resource", "test_error_handling", "test_image_content", "test_multiple_content_types",
	"test_reconnection", "test_sampling", "test_simple_text", "test_tool_with_logging", "test_tool_with_progress",
}

func conformanceManifest(t *testing.T) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: klock/v1\nagent: {id: conformance-%d}\nworkdir: /tmp\nintents: [CONSUMES FILE:/tmp/**]\ndeclared_tools:\n", time.Now().UnixNano())
	for _, n := range conformanceTools {
		fmt.Fprintf(&b, "  - {name: %s, blast_radius: read, side_effects: READ, category: A, timeout_ms: 30000}\n", n)
	}
	b.WriteString(`cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: {units: 1, currency: USD}, max_cost: {units: 2, currency: USD}}
hitl: {default_mode: HOTL}
`)
	p := filepath.Join(t.TempDir(), "conformance.yaml")
	writeFile(t, p, b.String())
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitPort(t *testing.T, port int) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("nothing listens on port %d", port)
}

func start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Stderr = &testLog{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}

var scenarioRe = regexp.MustCompile(`(?m)^([✓✗]) ([a-z0-9-]+): (\d+) passed, (\d+) failed`)

// runConformance runs the suite against url and returns the scenarios that
// passed and the total count.
func runConformance(t *testing.T, bin, url string) (passed map[string]bool, total int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "server", "--url", url).CombinedOutput() // it exits 1 when any scenario fails
	passed = map[string]bool{}
	for _, m := range scenarioRe.FindAllStringSubmatch(string(out), -1) {
		total++
		if m[1] == "✓" {
			passed[m[2]] = true
		}
	}
	if total == 0 {
		t.Fatalf("conformance printed no scenarios:\n%s", out)
	}
	return passed, total
}

// TestConformanceThroughProxy runs the MCP conformance suite against
// server-everything directly and through klock mcp (streamable HTTP), and
// requires the same scenarios to pass both ways.
func TestConformanceThroughProxy(t *testing.T) {
	suite := npmBin(t, "conformance")
	everything := npmBin(t, "mcp-server-everything")
	up := freePort(t)
	srv := exec.Command("node", everything, "streamableHttp")
	srv.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", up))
	start(t, srv)
	waitPort(t, up)
	upstream := fmt.Sprintf("http://127.0.0.1:%d/mcp", up)

	direct, total := runConformance(t, suite, upstream)

	px := freePort(t)
	proxy := exec.Command(klockBin, "mcp", "-m", conformanceManifest(t), "--state-dir", t.TempDir(),
		"--listen", fmt.Sprintf("127.0.0.1:%d", px), "--upstream", upstream)
	start(t, proxy)
	waitPort(t, px)
	through, total2 := runConformance(t, suite, fmt.Sprintf("http://127.0.0.1:%d/mcp", px))

	t.Logf("MCP conformance (server-everything): %d of %d scenarios pass directly, %d of %d through klock mcp", len(direct), total, len(through), total2)
	for s := range direct {
		if !through[s] {
			t.Errorf("scenario %s passes directly but not through the proxy", s)
		}
	}
	for s := range through {
		if !direct[s] {
			t.Logf("scenario %s passes through the proxy only", s)
		}
	}
	if len(through) != len(direct) || total != total2 {
		t.Errorf("through the proxy %d/%d, directly %d/%d: want the same", len(through), total2, len(direct), total)
	}
}
