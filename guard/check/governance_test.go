package check

import (
	"errors"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
)

// TestGovernanceOnlyNarrows: klock tools limit
// --per-run 0 lifted a manifest's per_run; governance may only narrow.
func TestGovernanceOnlyNarrows(t *testing.T) {
	p, err := New(example(t, "refund-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// issue_refund declares per_run: 3. A limit on another window, with
	// per_run 0 (what klock tools limit --per-minute 2 sent), keeps it.
	if err := p.Limit("issue_refund", policy.RateLimits{PerRun: 0, PerMinute: 20}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if d := p.Decide(&Call{Tool: "issue_refund", Args: refund(10), Context: refundCtx, RunID: "r1"}); d.Verdict != Allow {
			t.Fatalf("call %d: %v %v", i+1, d.Verdict, d.Err)
		}
	}
	if d := p.Decide(&Call{Tool: "issue_refund", Args: refund(10), Context: refundCtx, RunID: "r1"}); d.Verdict != Deny || d.Err.Reason != "rate_per_run" {
		t.Fatalf("4th call in the run after per_run 0: %v, want the manifest's per_run 3 to hold", d.Verdict)
	}
	// Above the manifest: refused, naming the limit.
	if err := p.Limit("issue_refund", policy.RateLimits{PerRun: 10}); !errors.Is(err, ErrWiden) {
		t.Fatalf("per_run 10 over the manifest's 3: %v, want ErrWiden", err)
	}
	one := 1
	if err := p.ChangeLimits("issue_refund", LimitChange{PerRun: &one}); err != nil {
		t.Fatal(err)
	}
	st := p.Status()
	for _, s := range st {
		if s.Name == "issue_refund" && (s.Limits.PerRun != 1 || s.Limits.PerMinute != 20) {
			t.Fatalf("after --per-run 1: %+v, want per_run 1 and the earlier per_minute 20 kept", s.Limits)
		}
	}
}

// memState is a State in memory, shared by two pipelines as a restart.
type memState struct {
	tools map[string]ToolState
}

func (m *memState) Load() (map[string]ToolState, error) { return m.tools, nil }
func (m *memState) tool(n string) ToolState {
	t, ok := m.tools[n]
	if !ok {
		t = ToolState{Runs: map[string]int{}, Buckets: map[string]BucketState{}}
	}
	return t
}
func (m *memState) SaveUse(n string, u Use) error {
	t := m.tool(n)
	t.Runs[u.RunID] = u.Calls
	for k, b := range u.Buckets {
		t.Buckets[k] = b
	}
	m.tools[n] = t
	return nil
}
func (m *memState) SaveGovernance(n string, g Governance) error {
	t := m.tool(n)
	t.Governance = g
	m.tools[n] = t
	return nil
}

// TestStateSurvivesRestart: with a State, a per_day limit used stays used
// and a disabled tool stays disabled in a new pipeline (a restart).
func TestStateSurvivesRestart(t *testing.T) {
	m := example(t, "refund-agent.yaml")
	m.DeclaredTools = append([]policy.Tool(nil), m.DeclaredTools...)
	for i := range m.DeclaredTools {
		if m.DeclaredTools[i].Name == "get_account" {
			m.DeclaredTools[i].RateLimits = policy.RateLimits{PerDay: 1}
		}
	}
	st := &memState{tools: map[string]ToolState{}}
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	get := &Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_42"}, Context: refundCtx, RunID: "r1"}
	p1, err := New(m, WithState(st), WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	if d := p1.Decide(get); d.Verdict != Allow {
		t.Fatalf("first call: %v", d.Verdict)
	}
	if err := p1.Disable("send_email", "incident"); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(time.Hour)
	p2, err := New(m, WithState(st), WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	if d := p2.Decide(get); d.Verdict != Deny || d.Err.Reason != "rate_per_day" {
		t.Fatalf("after a restart the per_day 1 tool is usable again: %v", d.Verdict)
	}
	if p2.Declared("send_email") {
		t.Fatal("after a restart the disabled tool is back")
	}
}

// TestTrifectaPrivateReadsWait: under the HITL the lethal trifecta forces,
// a READ of private data waits for a human too; a READ
// of nothing private does not.
func TestTrifectaPrivateReadsWait(t *testing.T) {
	p, err := New(example(t, "trifecta-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Decide(&Call{Tool: "crm_lookup"}); d.Verdict != Escalate || d.Check != "trifecta" {
		t.Fatalf("private READ under the trifecta: %v (%s), want escalate", d.Verdict, d.Check)
	}
	if d := p.Decide(&Call{Tool: "read_inbox"}); d.Verdict != Allow {
		t.Fatalf("untrusted READ: %v, want allow", d.Verdict)
	}
}
