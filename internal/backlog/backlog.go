package backlog

import (
	"sync"
	"time"
)

// AbandonAfter bounds how long an ended Queue's pump waits for a reader
// of its backlog.
const AbandonAfter = 30 * time.Second

// Queue is a channel of up to slots values with a backlog behind it, up
// to limit values in all. Its methods may be called with the caller's own
// locks held: none blocks.
type Queue[T any] struct {
	mu      sync.Mutex
	ch      chan T
	backlog []T
	limit   int
	pumping bool // a pump goroutine moves the backlog into ch
	ended   bool
	done    chan struct{} // closed by End
}

// New returns a Queue whose channel has min(slots, limit) places and that
// holds at most limit values.
func New[T any](slots, limit int) *Queue[T] {
	return &Queue[T]{ch: make(chan T, max(min(slots, limit), 0)), limit: limit, done: make(chan struct{})}
}

// C is the channel the values arrive on, in the order they were put;
// closed after End once the values put before it were taken.
func (q *Queue[T]) C() <-chan T { return q.ch }

// Put delivers v in order: into the channel while nothing waits before
// it, else at the end of the backlog. It reports false when the queue
// holds its limit already or has ended.
func (q *Queue[T]) Put(v T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended {
		return false
	}
	if !q.pumping {
		select {
		case q.ch <- v:
			return true
		default:
		}
	}
	if len(q.ch)+len(q.backlog) >= q.limit {
		return false
	}
	q.backlog = append(q.backlog, v)
	if !q.pumping {
		q.pumping = true
		go q.pump()
	}
	return true
}

// pump moves the backlog into the channel, in order, blocking on the
// reader, and ends when the backlog is empty. While it runs, Put sends
// nothing past it. After End it closes the channel behind the last value,
// or gives up on a reader that takes none for AbandonAfter.
func (q *Queue[T]) pump() {
	var zero T
	sent := false
	for {
		q.mu.Lock()
		// The value being sent stays first in the backlog until it is in
		// the channel: Put's limit counts it.
		if sent && len(q.backlog) > 0 {
			q.backlog[0] = zero
			q.backlog = q.backlog[1:]
		}
		if len(q.backlog) == 0 {
			q.pumping = false
			q.backlog = nil
			if q.ended {
				close(q.ch)
			}
			q.mu.Unlock()
			return
		}
		v := q.backlog[0]
		q.mu.Unlock()
		select {
		case q.ch <- v:
			sent = true
			continue
		case <-q.done:
		}
		select {
		case q.ch <- v:
			sent = true
		case <-time.After(AbandonAfter):
			q.mu.Lock()
			q.backlog = nil
			q.mu.Unlock()
		}
	}
}

// Pending reports whether values wait to be read: in the channel, or in
// the backlog on their way to it (a receive then returns one, soon).
func (q *Queue[T]) Pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ch) > 0 || q.pumping
}

// End takes no more values and closes the channel behind those put
// before it. Later calls do nothing.
func (q *Queue[T]) End() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended {
		return
	}
	q.ended = true
	close(q.done)
	if !q.pumping {
		close(q.ch)
	}
}
