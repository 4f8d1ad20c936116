//go:build linux

package looprelay

import "math"

// The egress budget (network.max_egress_bytes) as the relay holds it.
// The packet wall drops a session's packets past its budget in the
// kernel; the relay's flows never cross the wall, so the relay holds its
// own: past its limit it forwards nothing more out of the session, and
// the flow that reached it stalls (the relay reads no more from the
// agent, which sees what a dropped packet would make it see: a send that
// does not complete), until the session kills the agent.

// SetBudget caps what the relay carries out of the session (every
// peer's out bytes together): once they reach limit, no more is
// forwarded out, and over is called, once, from the flow that reached
// it. The session lowers the limit by what the packet wall carried, so
// the two together stay within the budget. Without a call, no cap.
func (r *Relay) SetBudget(limit uint64, over func()) {
	r.mu.Lock()
	if over != nil {
		r.over = over
	}
	r.mu.Unlock()
	r.limit.Store(limit)
}

// spend accounts n bytes read from the agent: how many of them may go
// out (all of them, under the limit). Reaching the limit calls over.
func (r *Relay) spend(n int) int {
	sent := r.sent.Add(uint64(n))
	lim := r.limit.Load()
	if sent < lim {
		return n
	}
	if r.spent.CompareAndSwap(false, true) {
		r.mu.Lock()
		over := r.over
		r.mu.Unlock()
		if over != nil {
			over()
		}
	}
	// What of these n was still under the limit goes; the rest never.
	if before := sent - uint64(n); before < lim {
		return int(lim - before)
	}
	return 0
}

// noLimit is the limit before SetBudget.
const noLimit = math.MaxUint64
