package observe

import (
	"time"

	"github.com/klocklabs/klock/enforcer/event"
)

// chanSlots is the capacity of a Watch's channel. Records that find it
// full wait in the Watch's backlog, which grows only while the session
// lags, up to Options.Buffer records in all. A channel of Buffer slots
// (472 bytes a Record) cost every Watch 7.7 MB, allocated at its start and
// scanned by every collection while it lived, for slack a session rarely
// uses (BenchmarkWatch).
const chanSlots = 512

// abandonAfter bounds how long an ended Watch's pump waits for a reader
// of its backlog: a consumer that stopped reading gets no more, and the
// pump does not outlive it for long.
const abandonAfter = 30 * time.Second

// put delivers rec in order: into the channel while nothing waits before
// it, else at the end of the backlog, which a pump goroutine moves into
// the channel as the session reads. It reports false when the Watch holds
// Options.Buffer records already (the caller counts a loss) or has ended.
// Called with o.mu held, never blocking.
func (w *Watch) put(rec Record) bool {
	if w.closed {
		return false
	}
	if !w.pumping {
		select {
		case w.ch <- rec:
			return true
		default:
		}
	}
	if len(w.ch)+len(w.backlog) >= w.o.opts.Buffer {
		return false
	}
	w.backlog = append(w.backlog, rec)
	if !w.pumping {
		w.pumping = true
		go w.pump()
	}
	return true
}

// pump moves the backlog into the channel, in order, blocking on the
// session's reads, and ends when the backlog is empty. While it runs
// (w.pumping), put sends nothing past it. After the Watch ended it closes
// the channel behind the last record, or gives up on a reader that takes
// none for abandonAfter.
func (w *Watch) pump() {
	mu := &w.o.mu
	sent := false
	for {
		mu.Lock()
		// The record being sent stays first in the backlog until it is
		// in the channel: put's limit counts it.
		if sent && len(w.backlog) > 0 {
			w.backlog[0] = Record{}
			w.backlog = w.backlog[1:]
		}
		if len(w.backlog) == 0 {
			w.pumping = false
			w.backlog = nil
			if w.closed {
				close(w.ch)
			}
			mu.Unlock()
			return
		}
		rec := w.backlog[0]
		mu.Unlock()
		select {
		case w.ch <- rec:
			sent = true
			continue
		case <-w.ended:
		}
		select {
		case w.ch <- rec:
			sent = true
		case <-time.After(abandonAfter):
			mu.Lock()
			w.backlog = nil
			mu.Unlock()
		}
	}
}

// Pending reports whether records of the Watch wait to be read: in the
// channel, or in the backlog on their way to it (a receive then returns
// one, soon).
func (w *Watch) Pending() bool {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	return len(w.ch) > 0 || w.pumping
}

// end closes the channel, after the backlog when there is one (the
// records delivered stay readable, as a closed channel's buffered ones
// do). Called with o.mu held, after w.closed was set: nothing is put
// after it.
func (w *Watch) end() {
	close(w.ended)
	if !w.pumping {
		close(w.ch)
	}
}

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
