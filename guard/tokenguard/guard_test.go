package tokenguard

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/money"
)

func envelope() *policy.CostEnvelope {
	return &policy.CostEnvelope{MaxTokensIn: 12000, MaxTokensOut: 2000, MaxLatencyMS: 30000,
		MaxCost: &policy.Money{Amount: money.Amount{Units: 15, Currency: "USD"}}}
}

func usd(u uint64) *money.Amount { return &money.Amount{Units: u, Currency: "USD"} }

type approver struct {
	ok    bool
	asked int
}

func (a *approver) Approve(context.Context, ApprovalRequest) (bool, error) {
	a.asked++
	return a.ok, nil
}

func TestCheckRefusesEscalatesAllows(t *testing.T) {
	g, err := New(envelope())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		e    Estimate
		want Verdict
	}{
		{Estimate{TokensIn: 6000, TokensOut: 800, Cost: usd(4)}, Allow},
		{Estimate{TokensIn: 9600, TokensOut: 800}, Allow},    // exactly 80 %: not above
		{Estimate{TokensIn: 9601, TokensOut: 800}, Escalate}, // above 80 %
		{Estimate{TokensIn: 12000, TokensOut: 2000}, Escalate},
		{Estimate{TokensIn: 100, TokensOut: 2001}, Refuse},
		{Estimate{TokensIn: 100, Cost: usd(13)}, Escalate},
		{Estimate{TokensIn: 100, Cost: usd(16)}, Refuse},
		{Estimate{TokensIn: 100, Cost: &money.Amount{Units: 1, Currency: "EUR"}}, Refuse},
		{Estimate{LatencyMS: 30001}, Refuse},
	} {
		if d := g.Check(tc.e); d.Verdict != tc.want {
			t.Errorf("Check(%+v) = %+v, want %s", tc.e, d, tc.want)
		}
	}
	if _, err := New(nil); !errors.Is(err, ErrNoEnvelope) {
		t.Fatalf("nil envelope: %v", err)
	}
}

func TestAdmitAsksTheApproverAndNeverFailsOpen(t *testing.T) {
	g, _ := New(envelope())
	near := Estimate{TokensOut: 1900}
	if _, err := g.Admit(context.Background(), "a", near, nil); !errors.Is(err, ErrNoApprover) {
		t.Fatalf("escalation without approver: %v", err)
	}
	no := &approver{}
	if _, err := g.Admit(context.Background(), "a", near, no); !errors.Is(err, ErrNotApproved) || no.asked != 1 {
		t.Fatalf("denied approval: %v asked %d", err, no.asked)
	}
	yes := &approver{ok: true}
	if _, err := g.Admit(context.Background(), "a", near, yes); err != nil || yes.asked != 1 {
		t.Fatalf("approved: %v", err)
	}
	var re *RefusedError
	if _, err := g.Admit(context.Background(), "a", Estimate{TokensOut: 5000}, yes); !errors.As(err, &re) || yes.asked != 1 {
		t.Fatalf("a refusal must not reach the approver: %v", err)
	}
}

func TestFlightCancelsAtTheHardLimit(t *testing.T) {
	g, _ := New(envelope())
	f, ctx := g.Start(context.Background())
	defer f.End()
	if err := f.Observe(Usage{TokensIn: 100, TokensOut: 2000}); err != nil || ctx.Err() != nil {
		t.Fatalf("at the limit: %v %v", err, ctx.Err())
	}
	if err := f.Observe(Usage{TokensIn: 100, TokensOut: 2001}); !errors.Is(err, ErrHardLimit) {
		t.Fatalf("over: %v", err)
	}
	if !errors.Is(context.Cause(ctx), ErrHardLimit) {
		t.Fatalf("context not cancelled with the cause: %v", context.Cause(ctx))
	}
}

func TestActualsCarryProvenance(t *testing.T) {
	for _, tc := range []struct {
		a   Actual
		err error
	}{
		{Actual{TokensIn: 10, Source: APIUsage}, nil},
		{Actual{Source: Unavailable, UnavailableReason: "stream cut before usage"}, nil},
		{Actual{TokensIn: 10}, ErrNoProvenance},
		{Actual{TokensIn: 10, Source: "guess"}, ErrNoProvenance},
		{Actual{Source: Unavailable}, ErrNoProvenance},
		{Actual{TokensIn: 5, Source: Unavailable, UnavailableReason: "x"}, ErrFabricated},
	} {
		if err := tc.a.Validate(); !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("Validate(%+v) = %v, want %v", tc.a, err, tc.err)
		}
	}
}

func TestReportFlagsAgentsThatKeepOverrunning(t *testing.T) {
	g, _ := New(envelope())
	r := NewReporter()
	add := func(agent string, out int64, src Source) {
		a := Actual{TokensOut: out, Source: src}
		if src == Unavailable {
			a = Actual{Source: Unavailable, UnavailableReason: "no usage"}
		}
		r.Add(&receipt.Receipt{AgentID: agent, Metadata: receipt.Metadata{Cost: &receipt.Cost{
			Kind: receipt.KindModel, Actual: &receipt.Actual{TokensOut: receipt.Units(a.TokensOut), Source: string(a.Source)}, Exceeded: g.Exceeded(a)}}})
	}
	for i := 0; i < 4; i++ {
		add("spender", 2500, APIUsage)
		add("careful", 500, APIUsage)
	}
	add("careful", 2500, APIUsage)
	add("new", 2500, APIUsage)
	add("silent", 0, Unavailable)
	add("silent", 0, Unavailable)
	add("silent", 0, Unavailable)
	got := map[string]AgentReport{}
	for _, a := range r.Agents() {
		got[a.Agent] = a
	}
	if !got["spender"].Flagged || got["spender"].Limits[MaxTokensOut] != 4 {
		t.Errorf("spender: %+v", got["spender"])
	}
	if got["careful"].Flagged || got["new"].Flagged || got["silent"].Flagged || got["silent"].Unavailable != 3 {
		t.Errorf("flagged wrongly: %+v", got)
	}
	if r.Agents()[0].Agent != "spender" {
		t.Errorf("flagged agents come first: %+v", r.Agents())
	}
}

// TestReportKeepsToolCallsApart: a tool call's cost record is not a model
// call measured against the envelope: before, three cheap tool calls made
// an overrunning agent's one model call look like 1 in 4.
func TestReportKeepsToolCallsApart(t *testing.T) {
	r := NewReporter(WithMinRuns(1))
	model := &receipt.Receipt{AgentID: "a", Metadata: receipt.Metadata{Cost: &receipt.Cost{Envelope: &receipt.Envelope{MaxTokensOut: 2000},
		Actual: &receipt.Actual{TokensOut: 2500, Source: string(APIUsage)}, Exceeded: []string{"max_tokens_out: 2500 > 2000"}}}}
	r.Add(model)
	for i := 0; i < 3; i++ {
		r.Add(&receipt.Receipt{AgentID: "a", Metadata: receipt.Metadata{Cost: &receipt.Cost{Kind: receipt.KindTool,
			Actual: &receipt.Actual{Cost: receipt.U(1), Source: string(HarnessReported)}}}})
	}
	a := r.Agents()[0]
	if a.Measured != 1 || a.Exceeding != 1 || !a.Flagged || a.ToolCalls != 3 {
		t.Fatalf("report: %+v", a)
	}
	if s := a.String(); !strings.Contains(s, "1 of 1 measured model calls") || !strings.Contains(s, "3 tool calls apart") {
		t.Fatalf("report line: %s", s)
	}
}
