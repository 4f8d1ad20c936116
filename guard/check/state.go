package check

import (
	"errors"
	"fmt"
	"time"

	"github.com/klocklabs/klock/policy"
)

// A gateway restarted must not forget: a per_day: 1 tool used today stays
// used, a run's per_run count stays counted, a tool an operator disabled
// stays disabled. State is where the pipeline keeps that (guard/ratestate
// keeps it in SQLite); without one (WithState not given) it is memory only.

// ErrState: the rate-limit or governance state could not be read or
// written; the pipeline then refuses rather than forget a limit.
var ErrState = errors.New("rate-limit state")

// State persists the pipeline's counters and governance.
type State interface {
	// Load returns every tool's saved state.
	Load() (map[string]ToolState, error)
	// SaveUse records one allowed call: the run's new count and the
	// buckets the call took from. It need not be durable when it returns:
	// the gateway's audit record of the dispatch carries the same values
	// (Decision.Use), flushed before the call is dispatched, and a
	// restarted gateway merges those records back (Merge).
	SaveUse(tool string, u Use) error
	// SaveGovernance records a tool's governance (disable, limits).
	SaveGovernance(tool string, g Governance) error
}

// ToolState is what State keeps for one tool.
type ToolState struct {
	Governance Governance
	Runs       map[string]int         // run id -> calls
	Buckets    map[string]BucketState // window [+ argument value] -> bucket
}

// Governance is what operators changed on a running gateway.
type Governance struct {
	Disabled string             // non-empty: disabled, with the reason
	Limits   *policy.RateLimits // narrowing limits; 0 in a window: the manifest's stands
}

// BucketState is one token bucket.
type BucketState struct {
	Tokens float64
	Last   time.Time
}

// Use is one allowed call's effect on the counters.
type Use struct {
	RunID   string
	Calls   int
	Buckets map[string]BucketState
}

// WithState makes the pipeline load its counters and governance from s and
// save every change to it before it takes effect.
func WithState(s State) Option { return func(p *Pipeline) { p.state = s } }

// restore applies the saved state to the compiled contracts.
func (p *Pipeline) restore() error {
	saved, err := p.state.Load()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := p.restoreDispatched(); err != nil {
		return err
	}
	for name, st := range saved {
		c, ok := p.tools[name]
		if !ok {
			continue // a tool the manifest no longer declares
		}
		c.disabled = st.Governance.Disabled
		c.override = st.Governance.Limits
		for run, n := range st.Runs {
			c.lim.perRun[run] = n
		}
		for k, b := range st.Buckets {
			c.lim.buckets[k] = &bucket{tokens: b.Tokens, last: b.Last}
		}
	}
	return nil
}

// saveUse persists the call c.lim.take just counted and returns it. The
// caller holds c.mu.
func (p *Pipeline) saveUse(c *contract, runID string) (*Use, error) {
	u := &Use{RunID: runID, Calls: c.lim.perRun[runID], Buckets: make(map[string]BucketState, len(c.lim.took))}
	for _, k := range c.lim.took {
		b := c.lim.buckets[k]
		u.Buckets[k] = BucketState{Tokens: b.tokens, Last: b.last}
	}
	if p.state == nil {
		return u, nil
	}
	if err := p.state.SaveUse(c.tool.Name, *u); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	return u, nil
}

// Merge puts back what a dispatched call of tool left in the counters
// (its audit record's, after a restart whose state may have lost it):
// the run's count if larger, each bucket if it was updated later (at the
// same time, the emptier). Merging records in any order, or twice, gives
// the same state. retryKey (non-idempotent tools) is recorded as having
// reached the tool as callID. A tool no longer declared is skipped.
func (p *Pipeline) Merge(tool string, u Use, retryKey, callID string) error {
	c, ok := p.tools[tool]
	if !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := false
	if u.Calls > c.lim.perRun[u.RunID] {
		c.lim.perRun[u.RunID] = u.Calls
		changed = true
	}
	for k, b := range u.Buckets {
		cur := c.lim.buckets[k]
		if cur == nil || b.Last.After(cur.last) || b.Last.Equal(cur.last) && b.Tokens < cur.tokens {
			c.lim.buckets[k] = &bucket{tokens: b.Tokens, last: b.Last}
			changed = true
		}
	}
	if changed && p.state != nil {
		cur := Use{RunID: u.RunID, Calls: c.lim.perRun[u.RunID], Buckets: map[string]BucketState{}}
		for k := range u.Buckets {
			b := c.lim.buckets[k]
			cur.Buckets[k] = BucketState{Tokens: b.tokens, Last: b.last}
		}
		if err := p.state.SaveUse(tool, cur); err != nil {
			return fmt.Errorf("%w: %w", ErrState, err)
		}
	}
	if retryKey == "" || c.retryOf(u.RunID, retryKey) != "" {
		return nil
	}
	if ds, ok := p.state.(DispatchState); ok {
		if err := ds.SaveDispatched(tool, u.RunID, retryKey, callID); err != nil {
			return fmt.Errorf("%w: %w", ErrState, err)
		}
	}
	c.markDispatched(u.RunID, retryKey, callID)
	return nil
}

// saveGovernance persists c's governance as it would be. The caller holds c.mu.
func (p *Pipeline) saveGovernance(c *contract, g Governance) error {
	if p.state == nil {
		return nil
	}
	if err := p.state.SaveGovernance(c.tool.Name, g); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	return nil
}
