package check

import (
	"fmt"

	"github.com/klocklabs/klock/policy"
)

// Governance hooks (seed 004 §14): they change a running pipeline. Every
// change narrows or restores; none can declare a tool the manifest did not.

// Disable refuses every further call of name with tool_restricted and hides
// it from tools/list.
func (p *Pipeline) Disable(name, reason string) error {
	c, ok := p.tools[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	if reason == "" {
		reason = "disabled by an operator"
	}
	c.mu.Lock()
	c.disabled = reason
	c.mu.Unlock()
	return nil
}

// Enable undoes Disable.
func (p *Pipeline) Enable(name string) error {
	c, ok := p.tools[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	c.mu.Lock()
	c.disabled = ""
	c.mu.Unlock()
	return nil
}

// Limit replaces name's rate limits (per_run, per_minute, per_hour,
// per_day; per_argument limits of the contract are kept). The buckets keep
// their state, so a lowered limit applies from the next call.
func (p *Pipeline) Limit(name string, l policy.RateLimits) error {
	c, ok := p.tools[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	if l.PerRun < 0 || l.PerMinute < 0 || l.PerHour < 0 || l.PerDay < 0 {
		return fmt.Errorf("negative rate limit for %s", name)
	}
	c.mu.Lock()
	l.PerArgument = c.tool.RateLimits.PerArgument
	c.override = &l
	c.mu.Unlock()
	return nil
}

// ToolStatus is one tool's governance state.
type ToolStatus struct {
	Name     string            `json:"name"`
	Category string            `json:"category,omitempty"`
	Effect   string            `json:"side_effects"`
	Disabled string            `json:"disabled,omitempty"`
	Limits   policy.RateLimits `json:"limits"`
	Timeout  string            `json:"timeout"`
}

// Status lists every declared tool's state.
func (p *Pipeline) Status() []ToolStatus {
	out := make([]ToolStatus, 0, len(p.names))
	for _, n := range p.names {
		c := p.tools[n]
		c.mu.Lock()
		l := c.limits()
		if l.PerMinute == 0 {
			l.PerMinute = c.categoryPerMinute
		}
		out = append(out, ToolStatus{Name: n, Category: c.tool.Category, Effect: string(c.tool.SideEffects), Disabled: c.disabled, Limits: l, Timeout: c.timeout.String()})
		c.mu.Unlock()
	}
	return out
}

// Confidential reports whether every tool runs in confidential mode.
func (p *Pipeline) Confidential() bool { return p.confidential }
