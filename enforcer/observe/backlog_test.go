package observe

import (
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/internal/backlog"
)

// newTestWatch is a Watch as Observer.Watch makes it, with no programs.
func newTestWatch(limit int) *Watch {
	return &Watch{o: &Observer{opts: Options{Buffer: limit}}, q: backlog.New[Record](chanSlots, limit)}
}

func seq(i int) Record { return Record{Event: event.Event{PID: uint32(i)}} }

// putAll puts n records numbered from first, as the reader does (under
// o.mu), and returns how many were taken.
func putAll(w *Watch, first, n int) int {
	taken := 0
	for i := first; i < first+n; i++ {
		w.o.mu.Lock()
		if w.put(seq(i)) {
			taken++
		}
		w.o.mu.Unlock()
	}
	return taken
}

// TestBacklogKeepsOrder: records past the channel's slots wait in the
// backlog and reach the reader in order; the Watch holds at most
// Options.Buffer records; an ended Watch takes none and its channel
// closes behind the last record delivered (internal/backlog tests the
// queue itself).
func TestBacklogKeepsOrder(t *testing.T) {
	w := newTestWatch(chanSlots + 100)
	if got := putAll(w, 0, chanSlots+150); got != chanSlots+100 {
		t.Errorf("took %d, want the limit %d", got, chanSlots+100)
	}
	if !w.Pending() {
		t.Error("not Pending with records waiting")
	}
	w.o.mu.Lock()
	w.closed = true
	w.end()
	if w.put(seq(0)) {
		t.Error("an ended Watch took a record")
	}
	w.o.mu.Unlock()
	n := 0
	for r := range w.Records() {
		if int(r.Event.PID) != n {
			t.Fatalf("record %d is %d: out of order", n, r.Event.PID)
		}
		n++
	}
	if n != chanSlots+100 {
		t.Errorf("read %d after the end, want %d", n, chanSlots+100)
	}
	if w.Pending() {
		t.Error("Pending after everything was read")
	}
}
