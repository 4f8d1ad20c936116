package check

import (
	"fmt"

	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// Seed 002: the orchestration layer "refuses to retry non-idempotent
// tools". A tool that is not idempotent (not READ, idempotency mode neither
// natural nor key) that already reached its tool in a run with the same
// arguments (RFC 8785 canonical JSON, paths where they lead) does not run
// again unsupervised: the second call escalates to a human, whose approval
// lets exactly that call through (the approval queue's fingerprint is the
// tool, the arguments and the run). Pending or denied, the agent gets
// tool_restricted from the approval (check "retry"). The memory of what
// ran is the pipeline's, kept by a State that is a DispatchState (guard/
// ratestate is) so a restarted gateway does not forget it.

// DispatchState is a State that also keeps, per tool and run, the first
// call of each argument key of a non-idempotent tool that reached it.
type DispatchState interface {
	State
	// LoadDispatched returns tool -> run -> key -> call id.
	LoadDispatched() (map[string]map[string]map[string]string, error)
	// SaveDispatched records one, durable before the call is dispatched.
	SaveDispatched(tool, run, key, callID string) error
	// ForgetDispatched drops one whose call never reached the tool.
	ForgetDispatched(tool, run, key string) error
}

// restoreDispatched loads what reached the tools before a restart.
func (p *Pipeline) restoreDispatched() error {
	ds, ok := p.state.(DispatchState)
	if !ok {
		return nil
	}
	saved, err := ds.LoadDispatched()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	for tool, runs := range saved {
		if c, ok := p.tools[tool]; ok {
			c.dispatched = runs
		}
	}
	return nil
}

// retryOf returns the call id of the call of c with key that already
// reached the tool in run ("": none). Called with c.mu held.
func (c *contract) retryOf(run, key string) string {
	return c.dispatched[run][key]
}

// retryKey is the key of a non-idempotent tool's call ("" for an
// idempotent tool: its retries are safe, or replayed by key).
func retryKey(t *policy.Tool, args map[string]any) string {
	if t.Idempotent() {
		return ""
	}
	k, err := idemKey(t.Name, nil, args)
	if err != nil {
		// Arguments that cannot be canonicalized still get a key: two
		// such calls are judged the same, the stricter reading.
		return "uncanonical"
	}
	return k
}

// Dispatching records that call, decided as d, is about to reach its tool
// as callID, and refuses it (tool_restricted, reason retry_refused) when
// its tool is not idempotent and a call with the same arguments reached it
// in the run since d was decided without a human approving the repeat.
func (p *Pipeline) Dispatching(call *Call, d *Decision, callID string) *toolerr.Error {
	c, ok := p.tools[call.Tool]
	if !ok || d.RetryKey == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	first := c.retryOf(call.RunID, d.RetryKey)
	if first != "" && !d.Retry {
		e := toolerr.New(toolerr.Restricted, "retry_refused",
			"%s is not idempotent and %s reached it with the same arguments first: a second call could do it twice; call again to ask a human to approve the repeat", call.Tool, first)
		e.Check = "retry"
		return e
	}
	if first != "" {
		return nil
	}
	// Kept before it runs: a call whose record cannot be kept is refused,
	// so a restart cannot let its repeat through unseen.
	if ds, ok := p.state.(DispatchState); ok {
		if err := ds.SaveDispatched(call.Tool, call.RunID, d.RetryKey, callID); err != nil {
			e := toolerr.New(toolerr.InternalError, "rate_state", "%s: %v", call.Tool, fmt.Errorf("%w: %w", ErrState, err))
			e.Check = "retry"
			return e
		}
	}
	c.markDispatched(call.RunID, d.RetryKey, callID)
	return nil
}

// markDispatched records that the call of c with key reached the tool in
// run as callID. Called with c.mu held.
func (c *contract) markDispatched(run, key, callID string) {
	if c.dispatched == nil {
		c.dispatched = map[string]map[string]string{}
	}
	if c.dispatched[run] == nil {
		c.dispatched[run] = map[string]string{}
	}
	c.dispatched[run][key] = callID
}

// NotDispatched forgets callID's record when the call never reached its
// tool after all (it could not be started): its retry is no repeat.
func (p *Pipeline) NotDispatched(call *Call, d *Decision, callID string) {
	c, ok := p.tools[call.Tool]
	if !ok || d.RetryKey == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dispatched[call.RunID][d.RetryKey] != callID {
		return
	}
	delete(c.dispatched[call.RunID], d.RetryKey)
	if ds, ok := p.state.(DispatchState); ok {
		// Best effort: a record left behind only asks a human once more.
		_ = ds.ForgetDispatched(call.Tool, call.RunID, d.RetryKey)
	}
}
