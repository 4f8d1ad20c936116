package mcp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/etcdtest"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// payServer is an MCP server (node, no packages) with one tool, pay,
// that reports a cost of 0.02 USD per call.
const payServer = `const rl = require('readline').createInterface({input: process.stdin});
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  let r = {};
  if (m.method === 'initialize') r = {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: 'pay', version: '1'}};
  if (m.method === 'tools/list') r = {tools: [{name: 'pay', inputSchema: {type: 'object'}}]};
  if (m.method === 'tools/call') r = {content: [{type: 'text', text: 'paid'}], _meta: {cost: '0.02 USD'}};
  process.stdout.write(JSON.stringify({jsonrpc: '2.0', id: m.id, result: r}) + '\n');
});
`

// TestFleetBudgetAcrossGateways: two hosts' klock mcp gateways (each its
// own fleet marker, as klockd writes it, and its own receipts) serve one
// manifest whose grant allows 5 invocations; the first host's gateway
// makes 3 calls and stops, the second is allowed 2 of 4 and refused the
// rest with tool_restricted (budget, fleet-wide), and klock receipts
// verify --fleet finds that the two chains add up to the fleet ledger.
// The gateways run as root, so their calls' leases are the fleet's too.
func TestFleetBudgetAcrossGateways(t *testing.T) {
	testutil.RequirePrivileged(t)
	if _, err := exec.LookPath("node"); err != nil {
		testutil.Unavailable(t, "node is not installed")
	}
	c := etcdtest.Start(t, 1)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	writeFile(t, filepath.Join(base, "pay.js"), payServer)
	manifest := filepath.Join(base, "agent.yaml")
	writeFile(t, manifest, fmt.Sprintf(`apiVersion: klock/v1
agent: {id: fleet-agent-%d, version: 1.0.0}
mode: strict
workdir: %s
intents: []
declared_tools:
  - {name: pay, type: read, blast_radius: read, category: B, side_effects: READ, timeout_ms: 30000}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
grants:
  - {tool: pay, max_cost_per_invocation: "0.05 USD", max_total_cost: "1.00 USD", max_invocations: 5}
`, time.Now().UnixNano(), base))
	var dirs []string
	for i, h := range []struct {
		name          string
		calls, allows int
	}{{"hostA", 3, 3}, {"hostB", 4, 2}} {
		dir := filepath.Join(base, h.name)
		marker := filepath.Join(dir, "fleet.json")
		writeFile(t, marker, fmt.Sprintf(`{"endpoints":[%q],"prefix":"/mcp-test","host":%q}`, c.Endpoints()[0], h.name))
		s := connectAs(t, "KLOCK_FLEET_MARKER="+marker, "-m", manifest, "--state-dir", filepath.Join(dir, "state"), "--control", filepath.Join(dir, "c.sock"),
			"--receipts", filepath.Join(dir, "receipts"), "--", "node", filepath.Join(base, "pay.js"))
		allowed := 0
		for j := 0; j < h.calls; j++ {
			r := call(t, s, "pay", map[string]any{})
			if !r.IsError {
				allowed++
				continue
			}
			e := refusal(t, r)
			if i == 0 || e.Class != "tool_restricted" || e.Reason != "budget" || !strings.Contains(e.Message, "fleet-wide 5 of 5 invocations") {
				t.Fatalf("%s: call %d: %+v", h.name, j+1, e)
			}
		}
		s.Close() // the gateway returns its unused block as it exits
		if allowed != h.allows {
			t.Fatalf("%s: %d of %d calls allowed, want %d", h.name, allowed, h.calls, h.allows)
		}
		dirs = append(dirs, filepath.Join(dir, "receipts"))
	}
	out, err := exec.Command(klockBin, append([]string{"receipts", "verify", "--etcd-endpoints", c.Endpoints()[0], "--etcd-prefix", "/mcp-test"}, dirs...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "2 members used 5 invocations and 0.10 USD; receipts: 5 and 0.10 USD") {
		t.Fatalf("klock receipts verify --fleet: %v\n%s", err, out)
	}
	t.Logf("klock receipts verify --fleet:\n%s", out)
}

// connectAs is connect with env added.
func connectAs(t *testing.T, env string, args ...string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.Command(klockBin, append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = &testLog{t: t}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "klock-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to klock mcp: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
