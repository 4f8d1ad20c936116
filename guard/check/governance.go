package check

import (
	"errors"
	"fmt"

	"github.com/klocklabs/klock/policy"
)

// Governance hooks (seed 004 §14): they change a running pipeline. Every
// change narrows or restores; none can declare a tool the manifest did not,
// and none can loosen a limit it declares. With a State, every change is
// saved before it takes effect, so a restart keeps it.

// ErrWiden: a governance limit would allow more than the manifest does.
var ErrWiden = errors.New("governance may only narrow the manifest's limits")

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
	defer c.mu.Unlock()
	if err := p.saveGovernance(c, Governance{Disabled: reason, Limits: c.override}); err != nil {
		return err
	}
	c.disabled = reason
	return nil
}

// Enable undoes Disable.
func (p *Pipeline) Enable(name string) error {
	c, ok := p.tools[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := p.saveGovernance(c, Governance{Limits: c.override}); err != nil {
		return err
	}
	c.disabled = ""
	return nil
}

// Limit replaces name's governance limits (per_run, per_minute, per_hour,
// per_day; 0: none from governance, the manifest's stands). A limit above
// what the manifest declares is refused with ErrWiden: the limits in force
// are always the lower of the two. The buckets keep their state, so a
// lowered limit applies from the next call.
func (p *Pipeline) Limit(name string, l policy.RateLimits) error {
	c, ok := p.tools[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.setLimits(c, l)
}

// LimitChange names the windows a governance change sets; nil leaves the
// window's governance limit as it is.
type LimitChange struct {
	PerRun    *int `json:"per_run,omitempty"`
	PerMinute *int `json:"per_minute,omitempty"`
	PerHour   *int `json:"per_hour,omitempty"`
	PerDay    *int `json:"per_day,omitempty"`
}

// ChangeLimits sets the windows ch names and keeps the others' governance
// limits (klock tools limit --per-minute 2 leaves a governance per_run
// alone), under the same rule as Limit.
func (p *Pipeline) ChangeLimits(name string, ch LimitChange) error {
	c, ok := p.tools[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var l policy.RateLimits
	if c.override != nil {
		l = *c.override
	}
	for _, f := range []struct {
		v   *int
		dst *int
	}{{ch.PerRun, &l.PerRun}, {ch.PerMinute, &l.PerMinute}, {ch.PerHour, &l.PerHour}, {ch.PerDay, &l.PerDay}} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	return p.setLimits(c, l)
}

// setLimits checks l narrows the manifest, saves it, then applies it. The
// caller holds c.mu.
func (p *Pipeline) setLimits(c *contract, l policy.RateLimits) error {
	name := c.tool.Name
	if l.PerRun < 0 || l.PerMinute < 0 || l.PerHour < 0 || l.PerDay < 0 {
		return fmt.Errorf("negative rate limit for %s: give a positive limit, or 0 to leave the manifest's", name)
	}
	d := c.declared()
	for _, w := range []struct {
		name       string
		gov, limit int
	}{{"per_run", l.PerRun, d.PerRun}, {"per_minute", l.PerMinute, d.PerMinute}, {"per_hour", l.PerHour, d.PerHour}, {"per_day", l.PerDay, d.PerDay}} {
		if w.gov > 0 && w.limit > 0 && w.gov > w.limit {
			return fmt.Errorf("%w: %s %s %d is above the manifest's %d; give %d or less (0 leaves the manifest's), or change and re-sign the manifest",
				ErrWiden, name, w.name, w.gov, w.limit, w.limit)
		}
	}
	l.PerArgument = nil // per-argument limits are the contract's alone
	var o *policy.RateLimits
	if l.PerRun+l.PerMinute+l.PerHour+l.PerDay > 0 {
		o = &l
	}
	if err := p.saveGovernance(c, Governance{Disabled: c.disabled, Limits: o}); err != nil {
		return err
	}
	c.override = o
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
		out = append(out, ToolStatus{Name: n, Category: c.tool.Category, Effect: string(c.tool.SideEffects), Disabled: c.disabled, Limits: l, Timeout: c.timeout.String()})
		c.mu.Unlock()
	}
	return out
}

// Confidential reports whether every tool runs in confidential mode.
func (p *Pipeline) Confidential() bool { return p.confidential }
