package mcpproxy

import (
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/guard/approval"
	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/idem"
	"github.com/klocklabs/klock/policy"
)

const echoManifest = `apiVersion: klock/v1
agent: {id: bench-agent}
workdir: /tmp
intents: [CONSUMES FILE:/tmp/**]
declared_tools:
  - {name: echo, blast_radius: read, side_effects: READ, input_schema: {text: {type: string, max_length: 1000}}}
  - {name: a, blast_radius: read, side_effects: READ}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: {units: 1, currency: USD}, max_cost: {units: 2, currency: USD}}
hitl: {default_mode: HOTL}
`

func testProxy(t testing.TB) *Proxy { return testProxySync(t, true) }

// testProxySync builds a proxy over a real gateway; sync false skips the
// audit's fsync (to measure what the fsyncs cost, never in production).
func testProxySync(t testing.TB, sync bool) *Proxy {
	t.Helper()
	m, err := policy.Parse("echo.yaml", []byte(echoManifest))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if sync {
		gw, st, err := gateway.Open(m, gateway.Layout{Dir: dir, Agent: m.Agent.ID}, filepath.Join(dir, "audit.jsonl"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return New(gw)
	}
	p, _ := check.New(m)
	a, err := audit.Open(filepath.Join(dir, "audit.jsonl"), audit.WithoutSync())
	if err != nil {
		t.Fatal(err)
	}
	ap, _ := approval.Open(filepath.Join(dir, "approvals"))
	is, _ := idem.Open(filepath.Join(dir, "idem.jsonl"))
	gw, err := gateway.New(m, p, a, ap, is)
	if err != nil {
		t.Fatal(err)
	}
	return New(gw)
}
