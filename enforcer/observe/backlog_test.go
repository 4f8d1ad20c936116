package observe

import (
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
)

func newTestWatch(limit int) *Watch {
	return &Watch{o: &Observer{opts: Options{Buffer: limit}}, ch: make(chan Record, min(chanSlots, limit)), ended: make(chan struct{})}
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
// backlog and reach the reader in order, also when more come while the
// pump runs; the Watch holds at most its limit; an ended Watch's channel
// closes behind the last record delivered.
func TestBacklogKeepsOrder(t *testing.T) {
	w := newTestWatch(16384)
	if got := putAll(w, 0, 3*chanSlots); got != 3*chanSlots {
		t.Fatalf("took %d of %d", got, 3*chanSlots)
	}
	done := make(chan []int)
	go func() {
		var got []int
		for r := range w.ch {
			got = append(got, int(r.Event.PID))
		}
		done <- got
	}()
	putAll(w, 3*chanSlots, 5*chanSlots) // while the pump runs, or after
	w.o.mu.Lock()
	w.closed = true
	w.end()
	w.o.mu.Unlock()
	got := <-done
	if len(got) != 8*chanSlots {
		t.Fatalf("read %d records, want %d", len(got), 8*chanSlots)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("record %d is %d: out of order", i, v)
		}
	}
	if w.Pending() {
		t.Error("Pending after everything was read")
	}

	// The limit counts the channel and the backlog.
	w = newTestWatch(chanSlots + 100)
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
	for range w.ch {
		n++
	}
	if n != chanSlots+100 {
		t.Errorf("read %d after the end, want %d", n, chanSlots+100)
	}
}
