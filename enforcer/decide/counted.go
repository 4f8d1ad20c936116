package decide

import (
	"slices"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// CountedReads are reads of files below Dir that a backend counted in
// the kernel instead of reporting one by one, once the engine said one
// intent allows every such read there (CountFrom). The read that started
// them was reported and judged on its own (it is among Observed).
type CountedReads struct {
	Dir string
	// Intent is the index in Records.Intents of the intent that allows
	// every read there.
	Intent int
	Count  uint64
	// First is when counting started, and the read that started it.
	First   time.Time
	PID     uint32
	Comm    string
	Syscall string
}

// CountFrom says whether a backend may count, from now on, the reads of
// files below dir (at any depth) instead of reporting them: ev is a
// successful read (CONSUMES FILE) below dir that v allowed by an intent,
// and that intent allows every path below dir the same way (no rule
// names a path below it: policy.Ruleset.AllowsBelow), so judging each of
// them would give v again. Counted adds what the backend counted there.
func (e *Engine) CountFrom(ev event.Event, v Verdict, dir string) bool {
	t := ev.Triple
	if t.Type != policy.ObjFile || t.Predicate != policy.Consumes || ev.Extra.Type != 0 || ev.Errno != 0 || ev.Blocked ||
		v.Action != ActionAllow || v.Intent == nil || v.Created || v.Unnamed || v.Refused || !strings.HasPrefix(t.Path, dir+"/") {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.below.known || e.below.dir != dir {
		d, same := e.rs.AllowsBelow(policy.Consumes, dir)
		e.below = belowAnswer{known: true, dir: dir, d: d, same: same}
	}
	d, same := e.below.d, e.below.same
	if !same || !d.Allowed || d.Intent != v.Intent {
		return false
	}
	if e.counted == nil {
		e.counted = map[string]*CountedReads{}
	}
	i := e.index[d.Intent]
	switch c := e.counted[dir]; {
	case c == nil:
		e.counted[dir] = &CountedReads{Dir: dir, Intent: i, First: ev.Time, PID: ev.PID, Comm: ev.Comm, Syscall: ev.Syscall}
	case c.Intent != i:
		return false // counted under another intent before the scope grew
	}
	return true
}

// Counted adds n reads a backend counted below dir since CountFrom named it:
// to the intent that allows them, and to the session's events. They are
// never judged again (CountFrom judged them all).
func (e *Engine) Counted(dir string, n uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.counted[dir]
	if c == nil || n == 0 {
		return
	}
	c.Count += n
	e.events += n
	if c.Intent >= 0 && c.Intent < len(e.uses) {
		e.uses[c.Intent] += n
	}
}

// countedRecords are the directories with reads counted below them, by
// first use.
// Called with e.mu held.
func (e *Engine) countedRecords() []CountedReads {
	var out []CountedReads
	for _, c := range e.counted {
		if c.Count > 0 {
			out = append(out, *c)
		}
	}
	slices.SortFunc(out, func(a, b CountedReads) int {
		if c := a.First.Compare(b.First); c != 0 {
			return c
		}
		return strings.Compare(a.Dir, b.Dir)
	})
	return out
}
