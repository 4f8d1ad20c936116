package main

import (
	"context"
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

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/metrics"
	"github.com/klocklabs/klock/internal/testutil"
	dto "github.com/prometheus/client_model/go"
)

// guardRow runs a real tool gateway (klock tools serve) whose records go
// to the test's klockd: one declared call that a plugin answers with its
// cost and tokens, and one call of an undeclared tool, refused. klockd's
// guard metrics move by exactly those: allow and deny by one, the grant's
// spend by the plugin's cent, tool tokens by its three.
func guardRow(t *testing.T, k *klockRun, addr string) {
	t.Helper()
	before := scrape(t, addr)
	base := testutil.OpenDir(t, -1)
	writeMode(t, filepath.Join(base, "plugins", "greet", "plugin.json"), 0o644,
		`{"name":"greet","version":"1.0.0","entry":"run.sh","capabilities":["tool.greet.invoke"],"permissions":{"network":false,"filesystem":false}}`)
	writeMode(t, filepath.Join(base, "plugins", "greet", "run.sh"), 0o755,
		"#!/bin/sh\nread -r line\nprintf '{\"output\":\"hi\",\"tokens_used\":3,\"cost\":\"0.01 USD\"}\\n'\n")
	manifest := filepath.Join(base, "gateway.yaml")
	writeMode(t, manifest, 0o644, fmt.Sprintf(`apiVersion: klock/v1
agent: {id: metrics-gateway-%d, version: 1.0.0}
mode: strict
workdir: %s
intents: []
declared_tools:
  - {name: greet, type: read, blast_radius: read, category: A, side_effects: READ, timeout_ms: 30000}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
grants:
  - {tool: greet, max_cost_per_invocation: "0.05 USD", max_total_cost: "1.00 USD"}
hitl: {default_mode: HOTL}
`, time.Now().UnixNano(), base))
	url := startGateway(t, k, base, manifest)
	for body, want := range map[string]int{`{"tool":"greet","args":{}}`: http.StatusOK, `{"tool":"secret","args":{}}`: http.StatusForbidden} {
		resp, err := http.Post(url+"/v1/tools/call", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s: %d %s, want %d", body, resp.StatusCode, out, want)
		}
	}
	// A scrape gathers the families one after the other while klockd
	// counts a record: wait until every family has it, then hold each to
	// exactly its share.
	after := waitFor(t, addr, "the gateway's records", func(f map[string]*dto.MetricFamily) bool {
		return delta(before, f, "klock_guard_decisions_total", map[string]string{"outcome": metrics.GuardDeny}) >= 1 &&
			delta(before, f, "klock_guard_decisions_total", map[string]string{"outcome": metrics.GuardAllow}) >= 1 &&
			delta(before, f, "klock_budget_spent_minor_units_total", map[string]string{"grant": "greet", "currency": "USD"}) >= 1 &&
			delta(before, f, "klock_tokens_metered_total", map[string]string{"kind": metrics.TokensTool}) >= 3
	})
	for name, want := range map[string]struct {
		labels map[string]string
		delta  float64
	}{
		"klock_guard_decisions_total{allow}":    {map[string]string{"outcome": metrics.GuardAllow}, 1},
		"klock_guard_decisions_total{deny}":     {map[string]string{"outcome": metrics.GuardDeny}, 1},
		"klock_guard_decisions_total{approved}": {map[string]string{"outcome": metrics.GuardApproved}, 0},
		"klock_guard_decisions_total{escalate}": {map[string]string{"outcome": metrics.GuardEscalate}, 0},
		"klock_budget_spent_minor_units_total":  {map[string]string{"grant": "greet", "currency": "USD"}, 1},
		"klock_tokens_metered_total{tool}":      {map[string]string{"kind": metrics.TokensTool}, 3},
	} {
		family := strings.SplitN(name, "{", 2)[0]
		if d := delta(before, after, family, want.labels); d != want.delta {
			t.Errorf("%s moved by %v, want %v", name, d, want.delta)
		}
	}
	if n := value(after, "klock_approvals_pending", nil); n != 0 {
		t.Errorf("klock_approvals_pending %v with no approval asked", n)
	}
}

// startGateway starts klock tools serve over base's plugins, publishing
// to the test's klockd, and returns its URL.
func startGateway(t *testing.T, k *klockRun, base, manifest string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	state := filepath.Join(base, "state")
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, k.bin, "tools", "serve", "-m", manifest, "--listen", addr, "--plugins", filepath.Join(base, "plugins"),
		"--state-dir", state, "--audit", filepath.Join(state, "audit.jsonl"), "--control", filepath.Join(state, "control.sock"),
		"--receipts", filepath.Join(base, "receipts"))
	srv.Env = append(os.Environ(), daemon.SocketEnv+"="+k.sock)
	log := &testutil.SyncBuffer{}
	srv.Stdout, srv.Stderr = log, log
	srv.Cancel = func() error { return srv.Process.Signal(os.Interrupt) }
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = srv.Wait()
		if t.Failed() {
			t.Logf("klock tools serve:\n%s", log.String())
		}
	})
	url := "http://" + addr
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/v1/tools"); err == nil {
			resp.Body.Close()
			return url
		}
	}
	t.Fatalf("klock tools serve did not listen:\n%s", log.String())
	return ""
}

func writeMode(t *testing.T, path string, mode os.FileMode, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
