package tokenguard

import (
	"fmt"
	"sort"
	"strings"

	"github.com/klocklabs/klock/guard/receipt"
)

// AgentReport is one agent's calibration: how many invocations had a
// measured actual, how many of those exceeded the envelope, and which
// limits. Unavailable actuals are counted apart: they are not evidence
// either way.
type AgentReport struct {
	Agent       string
	Measured    int
	Exceeding   int
	Unavailable int
	Limits      map[string]int // limit name -> times exceeded
	// ToolCalls are the agent's tool-call receipts with a cost record,
	// kept apart from the model calls above; ToolUnavailable of them had
	// no reported cost.
	ToolCalls       int `json:"tool_calls"`
	ToolUnavailable int `json:"tool_calls_unavailable"`
	Flagged         bool
}

// ReportOption configures Report.
type ReportOption func(*reportConfig)

type reportConfig struct {
	minRuns  int
	shareBPS int
}

// WithMinRuns sets how many measured invocations an agent needs before it
// can be flagged (default 3).
func WithMinRuns(n int) ReportOption { return func(c *reportConfig) { c.minRuns = n } }

// WithShare sets the share of measured invocations, in basis points, that
// must exceed the envelope to flag an agent (default 5000: half).
func WithShare(bps int) ReportOption { return func(c *reportConfig) { c.shareBPS = bps } }

// Reporter accumulates receipts carrying cost actuals.
type Reporter struct {
	cfg    reportConfig
	agents map[string]*AgentReport
}

// NewReporter returns an empty reporter.
func NewReporter(opts ...ReportOption) *Reporter {
	c := reportConfig{minRuns: 3, shareBPS: 5000}
	for _, o := range opts {
		o(&c)
	}
	return &Reporter{cfg: c, agents: map[string]*AgentReport{}}
}

// Add counts one receipt (those without a cost actual are ignored). Use it
// as the callback of receipt.VerifyFile so only verified receipts count.
func (r *Reporter) Add(rc *receipt.Receipt) error {
	c := rc.Metadata.Cost
	if c == nil || c.Actual == nil {
		return nil
	}
	agent := rc.AgentID
	if agent == "" {
		agent = rc.CapabilityID
	}
	a := r.agents[agent]
	if a == nil {
		a = &AgentReport{Agent: agent, Limits: map[string]int{}}
		r.agents[agent] = a
	}
	// Tool calls are counted apart: the cost envelope holds model calls,
	// and a tool's cost never calibrates it.
	if c.CallKind() == receipt.KindTool {
		a.ToolCalls++
		if c.Actual.Source == string(Unavailable) {
			a.ToolUnavailable++
		}
		return nil
	}
	if c.Actual.Source == string(Unavailable) {
		a.Unavailable++
		return nil
	}
	a.Measured++
	if len(c.Exceeded) > 0 {
		a.Exceeding++
		for _, l := range c.Exceeded {
			name, _, _ := strings.Cut(l, ":")
			a.Limits[name]++
		}
	}
	return nil
}

// Agents returns every agent, flagged ones first, then by name.
func (r *Reporter) Agents() []AgentReport {
	var out []AgentReport
	for _, a := range r.agents {
		a.Flagged = a.Measured >= r.cfg.minRuns && a.Exceeding*10000 >= a.Measured*r.cfg.shareBPS
		out = append(out, *a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Flagged != out[j].Flagged {
			return out[i].Flagged
		}
		return out[i].Agent < out[j].Agent
	})
	return out
}

func (a AgentReport) String() string {
	s := fmt.Sprintf("%s: %d of %d measured model calls exceeded the envelope", a.Agent, a.Exceeding, a.Measured)
	if a.Unavailable > 0 {
		s += fmt.Sprintf(" (%d without a measured actual)", a.Unavailable)
	}
	if a.ToolCalls > 0 {
		s += fmt.Sprintf("; %d tool calls apart (%d without a reported cost)", a.ToolCalls, a.ToolUnavailable)
	}
	return s
}
