package bpfprog

import (
	"time"

	"github.com/klocklabs/klock/enforcer/event"
)

// Losses is one session's count of records it was not given: its
// channel was full when the reader had one for it (Dropped), or its
// program dropped them in the kernel (Kernel, the per-session counter).
// The count is delivered (Deliver) whenever the session can take it,
// never blocking the reader: a loss is reported late rather than making
// the ring overflow for every session. Not safe for concurrent use: the
// owner's lock guards it.
type Losses struct {
	pending uint64 // not yet delivered
	kernel  uint64 // the kernel counter's last value seen
}

// Dropped counts one record the session's channel could not take.
func (l *Losses) Dropped() { l.pending++ }

// Kernel takes the kernel's per-session loss counter, total so far.
func (l *Losses) Kernel(total uint64) {
	if total > l.kernel {
		l.pending += total - l.kernel
		l.kernel = total
	}
}

// Pending is the count not yet delivered.
func (l *Losses) Pending() uint64 { return l.pending }

// Deliver offers the pending count to send (which must not block, and
// reports whether it was taken) when there is one.
func (l *Losses) Deliver(send func(n uint64) bool) {
	if l.pending > 0 && send(l.pending) {
		l.pending = 0
	}
}

// LostTo is Deliver's send for a session's channel of losses: it never
// blocks (a full channel takes the count with the next report).
func LostTo(ch chan<- event.Lost) func(n uint64) bool {
	return func(n uint64) bool {
		select {
		case ch <- event.Lost{Time: time.Now(), Count: n}:
			return true
		default:
			return false
		}
	}
}
