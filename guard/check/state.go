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
	// buckets the call took from, durable before the call proceeds (a
	// DeferredState's once synced: SyncState).
	SaveUse(tool string, u Use) error
	// SaveGovernance records a tool's governance (disable, limits).
	SaveGovernance(tool string, g Governance) error
}

// DeferredState is a State whose SaveUse (and DispatchState's
// SaveDispatched) return once written, before they are durable: Sync
// makes every save so far durable. The pipeline's caller syncs before the
// call it counted is dispatched (Pipeline.SyncState), beside its own
// durable writes (the audit's record of the dispatch), rather than wait
// for one fsync after the other.
type DeferredState interface {
	State
	Sync() error
}

// SyncState makes what the state saved so far durable (a DeferredState's;
// nothing to do for another, or without one). The caller must not
// dispatch a call this pipeline counted before it returns nil.
func (p *Pipeline) SyncState() error {
	d, ok := p.state.(DeferredState)
	if !ok {
		return nil
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	return nil
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

// saveUse persists the call c.lim.take just counted. The caller holds c.mu.
func (p *Pipeline) saveUse(c *contract, runID string) error {
	if p.state == nil {
		return nil
	}
	u := Use{RunID: runID, Calls: c.lim.perRun[runID], Buckets: map[string]BucketState{}}
	for _, k := range c.lim.took {
		b := c.lim.buckets[k]
		u.Buckets[k] = BucketState{Tokens: b.tokens, Last: b.last}
	}
	if err := p.state.SaveUse(c.tool.Name, u); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
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
