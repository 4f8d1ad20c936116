package vlog

import (
	"strings"
	"time"
)

// leases renders the KLIS leases the session held: the manifest's own one
// by one, the baseline's as a count (all with verbose), then how the
// session waited for them and whether any ended before it did.
func (r *renderer) leases(l *Log, verbose bool) {
	if len(l.Leases) == 0 && l.LeaseWait == nil && len(l.LeaseStalls) == 0 {
		return
	}
	r.section("Leases (KLIS) held", len(l.Leases))
	baseline, ended := 0, 0
	for _, h := range l.Leases {
		if h.End != "" {
			ended++
		}
		if h.Baseline && !verbose {
			baseline++
			continue
		}
		end := ""
		if h.End != "" {
			end = "  " + strings.ToUpper(h.End) + " before the session ended"
		}
		r.line("  %s  %s  %s%s", clock(h.Acquired), h.ID, h.Lease, end)
	}
	if baseline > 0 {
		r.line("  %d more for the baseline's intents (klock log -v lists them)", baseline)
	}
	if ended == 0 && len(l.Leases) > 0 && !l.Incomplete() {
		r.line("  released when the session ended")
	}
	for _, st := range l.LeaseStalls {
		frozen := "the agent ran on"
		if st.Frozen {
			frozen = "the agent was frozen"
		}
		r.line("  the lease store did not answer from %s for %s (%s), then %s: %s", clock(st.From), st.Length().Round(time.Millisecond), frozen, st.Outcome, st.Why)
	}
	w := l.LeaseWait
	if w == nil {
		return
	}
	r.line("  waited %s for them: %s (%d WAIT, %d DIE)", w.Waited().Round(time.Millisecond), plural(w.Attempts, "attempt"), w.Waits, w.Deaths)
	for _, b := range w.Behind {
		mine := ""
		if b.Intent != "" {
			mine = ", against its own " + b.Intent
		}
		r.line("    behind session %s (agent %s) holding %s%s", b.Session, b.Agent, b.Lease, mine)
	}
}
