package check

import (
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// Seed 002: "the orchestration layer ... trips the stopping rule after N
// consecutive errors". The gateway reports each dispatched call's outcome
// (Outcome); a tool whose last N outcomes in a run were all errors is
// refused for the rest of that run. A refusal by the pipeline itself is
// not an outcome of the tool and is not counted: the agent's bad
// arguments must not stop a tool for the run, the tool's failures must.

// Outcome records whether one dispatched call of tool in run failed (a tool
// error, a timeout, an output that broke its contract).
func (p *Pipeline) Outcome(tool, run string, failed bool) {
	c, ok := p.tools[tool]
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.errors == nil {
		c.errors = map[string]int{}
	}
	switch {
	case !failed && c.errors[run] < c.tool.ConsecutiveErrorLimit():
		delete(c.errors, run) // a success resets the count, unless already stopped
	case failed:
		c.errors[run]++
	}
}

// stopped returns the refusal of a tool stopped for run (nil: not stopped).
// Called with c.mu held.
func (c *contract) stopped(run string) *toolerr.Error {
	n, limit := c.errors[run], c.tool.ConsecutiveErrorLimit()
	if n < limit {
		return nil
	}
	return toolerr.New(toolerr.Restricted, "stopped",
		"%s failed %d times in a row in this run (max_consecutive_errors %d): it is stopped for the run; start a new run, or ask an operator to look at the tool",
		c.tool.Name, n, limit)
}

// needsGovernance reports whether t is category D and its first use in run
// has not been approved yet (seed 004 §3.4: "governance-only"). Called with
// c.mu held.
func (c *contract) needsGovernance(run string) bool {
	return c.tool.Category == "D" && !c.governed[run]
}

// Governed records that a human approved category D tool's use in run: later
// calls in the run need no further governance approval (their own
// autonomy rules still apply).
func (p *Pipeline) Governed(tool, run string) {
	c, ok := p.tools[tool]
	if !ok || c.tool.Category != "D" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.governed == nil {
		c.governed = map[string]bool{}
	}
	c.governed[run] = true
}

// Irreversible records that a REVERSIBLE-WRITE call of tool in run is past
// its rollback window (why says which): its effect can no longer be
// undone, so for the rest of the run the tool's calls are decided as an
// IRREVERSIBLE-WRITE's (seed 002: "within a known window"; past it the
// autonomy granted for being undoable no longer holds). The gateway
// reports it (its rollback journal keeps it across restarts).
func (p *Pipeline) Irreversible(tool, run, why string) {
	c, ok := p.tools[tool]
	if !ok || c.tool.SideEffects != policy.SideEffectReversibleWrite {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.expired == nil {
		c.expired = map[string]string{}
	}
	if c.expired[run] == "" {
		c.expired[run] = why
	}
}
