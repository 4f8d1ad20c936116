package observe

import (
	"time"

	"github.com/klocklabs/klock/enforcer/event"
)

// chanSlots is the capacity of a Watch's channel. Records that find it
// full wait in the Watch's backlog (internal/backlog), which grows only
// while the session lags, up to Options.Buffer records in all. A channel
// of Buffer slots (472 bytes a Record) cost every Watch 7.7 MB, allocated
// at its start and scanned by every collection while it lived, for slack
// a session rarely uses (BenchmarkWatch).
const chanSlots = 512

// put delivers rec in order; it reports false when the Watch holds
// Options.Buffer records already (the caller counts a loss) or has ended.
// Called with o.mu held, never blocking.
func (w *Watch) put(rec Record) bool {
	return !w.closed && w.q.Put(rec)
}

// Pending reports whether records of the Watch wait to be read: in the
// channel, or in the backlog on their way to it (a receive then returns
// one, soon).
func (w *Watch) Pending() bool { return w.q.Pending() }

// end closes the channel, after the backlog when there is one (the
// records delivered stay readable, as a closed channel's buffered ones
// do). Called with o.mu held, after w.closed was set: nothing is put
// after it.
func (w *Watch) end() { w.q.End() }

// send delivers rec without blocking the reader (which serves every
// session): a full Watch turns the record into a counted loss, reported
// as KindLost as soon as there is room. Called with o.mu held.
func (w *Watch) send(rec Record) {
	if w.losses.Pending() > 0 {
		if w.losses.Deliver(w.lostRecord); w.losses.Pending() > 0 {
			w.losses.Dropped()
			return
		}
	}
	if !w.put(rec) {
		w.losses.Dropped()
	}
}

// lostRecord is Losses.Deliver's send for a Watch: a KindLost record,
// never blocking the reader.
func (w *Watch) lostRecord(n uint64) bool {
	return w.put(Record{Kind: KindLost, CgroupID: w.id, Lost: event.Lost{Time: time.Now(), Count: n}})
}
