package plugin

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// Provider serves declared tools from plugins (the tool proxy's Provider).
type Provider struct {
	plugins map[string]*Plugin
	caps    map[string]string // tool -> its capability code
	actsAs  map[string]string // tool -> its permission.acts_as
	runner  *Runner
}

// NewProvider joins plugins with the agent's declared tools: a plugin
// serves the declared tool of its name when it lists the tool's capability
// code. A plugin named like a declared tool without that capability is an
// error (the gateway must not start with a plugin it cannot trust to be the
// tool); a plugin no declared tool names is loaded but unreachable.
//
// A plugin serving a category A tool may hold no network or file system
// permission (seed 004 §3.1: safe tools reach no network and touch no
// files): it is refused too.
func NewProvider(plugins map[string]*Plugin, declared func(name string) (*policy.Tool, bool), r *Runner) (*Provider, error) {
	p := &Provider{plugins: map[string]*Plugin{}, caps: map[string]string{}, actsAs: map[string]string{}, runner: r}
	for name, pl := range plugins {
		t, ok := declared(name)
		if !ok {
			continue
		}
		capCode := t.CapabilityCode()
		if t.Category == "A" && (len(pl.Permissions.Network) > 0 || len(pl.Permissions.Read)+len(pl.Permissions.Write) > 0) {
			return nil, fmt.Errorf("%w: plugin %s (%s) serves %s, a category A (safe) tool, and asks for network or file system permissions: drop them, or classify the tool B, C or D", ErrManifest, name, pl.Dir, name)
		}
		// A plugin that is the tool (tool.<name>.invoke) serves it under
		// the finer code an operator declared (tool.energy.meter.read).
		if !pl.Serves(capCode) && !pl.Serves("tool."+name+".invoke") {
			return nil, fmt.Errorf("%w: plugin %s (%s) serves %v, not the declared tool's capability %s", ErrManifest, name, pl.Dir, pl.Capabilities, capCode)
		}
		p.plugins[name], p.caps[name], p.actsAs[name] = pl, capCode, t.Permission.ActsAs
	}
	return p, nil
}

// Served lists the tools a plugin serves.
func (p *Provider) Served() []string { return Names(p.plugins) }

// Provides reports whether a plugin serves tool.
func (p *Provider) Provides(tool string) bool { _, ok := p.plugins[tool]; return ok }

// Invoke runs the call's plugin under a klock session.
func (p *Provider) Invoke(ctx context.Context, call *check.Call) (gateway.Outcome, error) {
	pl, ok := p.plugins[call.Tool]
	if !ok {
		return gateway.Outcome{}, fmt.Errorf("%w: %w", gateway.ErrNotDispatched, toolerr.New(toolerr.InternalError, "no_provider", "no plugin provides %s", call.Tool))
	}
	team, _ := call.Context["team_id"].(string)
	res, err := p.runner.Run(ctx, pl, Input{Tool: call.Tool, Args: gateway.ToolArgs(ctx, call),
		Context: InputContext{AgentRunID: call.RunID, TeamID: team, Capabilities: []string{p.caps[call.Tool]}, ActsAs: p.actsAs[call.Tool]}})
	if err != nil {
		return gateway.Outcome{}, err
	}
	out := gateway.Outcome{Result: res.Output, Structured: res.Output, Usage: check.Usage{TokensUsed: res.TokensUsed}}
	if res.Cost != nil {
		out.Usage.CostUnits, out.Usage.Currency, out.Usage.Known = res.Cost.Units, res.Cost.Currency, true
		out.Usage.Breakdown = res.Breakdown
		out.Usage.ReportedBy = fmt.Sprintf("plugin %s %s answer (klock session %s)", pl.Name, pl.Version, res.Session)
	} else {
		out.Usage.Reason = fmt.Sprintf("plugin %s reported no cost (session %s); the reservation stays charged", pl.Name, res.Session)
	}
	if res.Failed {
		out.ToolError = true
		e := toolerr.New(toolerr.InternalError, "plugin_error", "plugin %s: %s", pl.Name, res.Message)
		out.Result, _ = json.Marshal(e)
	}
	return out, nil
}
