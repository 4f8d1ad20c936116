package observe

import (
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/internal/backlog"
)

// TestHeldCalls: what becomes of an interrupted call's records, by its
// thread's next record.
func TestHeldCalls(t *testing.T) {
	rec := func(name string) []Record { return []Record{{Event: event.Event{Comm: name}}} }
	const connect, openat = 42, 257
	cases := []struct {
		name string
		next *raw // nil: none
		// flush: flushHeld's cutoff after the next record (zero: none)
		flush time.Duration
		want  []string
	}{
		{"the call run again: its record is the answer", &raw{tid: 7, pid: 5, nr: connect, op: opConnect}, 0, nil},
		{"another call: the program got EINTR", &raw{tid: 7, pid: 5, nr: openat, op: opOpen}, 0, []string{"held"}},
		{"another thread's record changes nothing", &raw{tid: 8, pid: 5, nr: openat, op: opOpen}, 0, nil},
		{"the process exited", &raw{tid: 5, pid: 5, op: opExit}, 0, []string{"held"}},
		{"another process exited", &raw{tid: 6, pid: 6, op: opExit}, 0, nil},
		{"the thread forked", &raw{tid: 7, pid: 5, nr: connect, op: opFork}, 0, []string{"held"}},
		{"heldMax went by", nil, -time.Second, []string{"held"}},
		{"heldMax has not gone by", nil, time.Second, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := &Watch{q: backlog.New[Record](4, 4)}
			at := time.Now()
			w.hold(&raw{tid: 7, pid: 5, nr: connect, op: opConnect}, rec("held"), at)
			if c.next != nil {
				w.settleHeld(c.next)
			}
			if c.flush != 0 {
				w.flushHeld(at.Add(-c.flush))
			}
			var got []string
			for len(w.Records()) > 0 {
				got = append(got, (<-w.Records()).Event.Comm)
			}
			if len(got) != len(c.want) || len(got) > 0 && got[0] != c.want[0] {
				t.Errorf("sent %q, want %q", got, c.want)
			}
		})
	}
	// An unwatched cgroup's channel is closed: nothing more is sent.
	w := &Watch{q: backlog.New[Record](4, 4)}
	w.hold(&raw{tid: 7, pid: 5, nr: connect}, rec("a"), time.Now())
	w.closed = true
	w.end()
	w.settleHeld(&raw{tid: 7, pid: 5, nr: openat})
	// Sync (a zero cutoff) sends every held call.
	w = &Watch{q: backlog.New[Record](4, 4)}
	w.hold(&raw{tid: 7, pid: 5, nr: connect}, rec("a"), time.Now())
	w.hold(&raw{tid: 9, pid: 5, nr: connect}, rec("b"), time.Now())
	w.flushHeld(time.Time{})
	if len(w.Records()) != 2 || len(w.held) != 0 {
		t.Errorf("Sync sent %d of 2 held calls, %d left", len(w.Records()), len(w.held))
	}
}
