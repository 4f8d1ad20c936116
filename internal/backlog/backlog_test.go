package backlog

import (
	"testing"
	"time"
)

func putAll(q *Queue[int], from, to int) int {
	n := 0
	for i := from; i < to; i++ {
		if q.Put(i) {
			n++
		}
	}
	return n
}

// TestKeepsOrder: values past the channel wait in the backlog and arrive
// in the order they were put, more arriving while the pump runs; End
// closes the channel behind the last; the limit counts the channel and
// the backlog; an ended queue takes nothing.
func TestKeepsOrder(t *testing.T) {
	const slots = 64
	q := New[int](slots, 16384)
	if got := putAll(q, 0, 3*slots); got != 3*slots {
		t.Fatalf("took %d of %d", got, 3*slots)
	}
	done := make(chan []int)
	go func() {
		var got []int
		for v := range q.C() {
			got = append(got, v)
		}
		done <- got
	}()
	putAll(q, 3*slots, 50*slots) // while the pump runs, or after
	q.End()
	got := <-done
	if len(got) != 50*slots {
		t.Fatalf("read %d values, want %d", len(got), 50*slots)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("value %d is %d: out of order", i, v)
		}
	}
	if q.Pending() {
		t.Error("Pending after everything was read")
	}

	q = New[int](slots, slots+100)
	if got := putAll(q, 0, slots+150); got != slots+100 {
		t.Errorf("took %d, want the limit %d", got, slots+100)
	}
	if !q.Pending() {
		t.Error("not Pending with values waiting")
	}
	q.End()
	q.End()
	if q.Put(0) {
		t.Error("an ended queue took a value")
	}
	n := 0
	for range q.C() {
		n++
	}
	if n != slots+100 {
		t.Errorf("read %d after the end, want %d", n, slots+100)
	}
}

// TestSmallLimit: a limit below the channel's slots is the channel's size.
func TestSmallLimit(t *testing.T) {
	q := New[int](512, 3)
	if got := putAll(q, 0, 10); got != 3 || cap(q.ch) != 3 {
		t.Fatalf("took %d into a channel of %d, want 3 and 3", got, cap(q.ch))
	}
	q.End()
	select {
	case <-time.After(time.Second):
		t.Fatal("no value")
	case v := <-q.C():
		if v != 0 {
			t.Fatalf("first value %d", v)
		}
	}
}
