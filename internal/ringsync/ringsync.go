// Package ringsync reads a BPF ring buffer in one goroutine and lets others
// wait until every record written before they asked has been handled.
// Every ring klock reads (the observer's, bpf-lsm's, the cgroup network
// and AF_UNIX guards') is read by one Loop.
//
// A session ends by reading what its kernel programs reported: a refusal
// still in the ring when the session's log is written is a refusal the log
// never shows (a permissive sendmmsg whose second, refused message only
// the AF_UNIX wall reported was missing from the log under load; a bpf-lsm
// refusal taken off the ring but not yet delivered when an emptiness test
// said "idle"). Sync asks the reader to flush the ring
// (ringbuf.Reader.Flush): ReadInto then returns every record in it, then
// ErrFlushed, and the loop answers the waiter once it has handed each
// record on. One "the ring is empty" test is not enough: the reader holds
// a record between taking it off the ring and handing it on.
//
// Programs that write below a wakeup threshold (BPF_RB_NO_WAKEUP) leave
// records that wake nobody; WithPoll makes the loop read at least every
// interval, and run the owner's periodic work (loss counters) there.
//
// Errors: Run returns when the reader is closed; other read errors go to
// the caller's report function and the loop goes on. Sync returns
// ErrClosed once Run has returned, the context's error unwrapped, or the
// flush's error.
package ringsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// ErrClosed: the loop's reader was closed; nothing more is handled.
var ErrClosed = errors.New("ringsync: the ring's reader is closed")

// Loop is one ring buffer's reading loop.
type Loop struct {
	rd      *ringbuf.Reader
	poll    time.Duration
	onPoll  func()
	onFlush func()

	syncMu sync.Mutex // one flush in flight at a time
	mu     sync.Mutex
	// flushed is closed by Run at the ErrFlushed of Sync's flush. Under mu.
	flushed chan struct{}
	done    chan struct{} // closed when Run returns
}

// Option configures a Loop.
type Option func(*Loop)

// WithPoll makes Run read at least every d, records that woke nobody
// included, and call f (if not nil) then; while records keep coming, f
// runs at least every d too (checked every 1,024 records).
func WithPoll(d time.Duration, f func()) Option {
	return func(l *Loop) { l.poll, l.onPoll = d, f }
}

// OnFlush runs f in Run's goroutine when a Sync's flush has been read
// through, before that Sync returns: what the owner holds back (records
// it batches) is to be handed on there.
func OnFlush(f func()) Option { return func(l *Loop) { l.onFlush = f } }

// New returns the loop over rd.
func New(rd *ringbuf.Reader, opts ...Option) *Loop {
	l := &Loop{rd: rd, done: make(chan struct{})}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Run reads records and hands each to handle, in order, until rd is
// closed (the record is reused: copy what is kept). report receives read
// errors (the loop goes on).
func (l *Loop) Run(handle func(*ringbuf.Record), report func(error)) {
	defer close(l.done)
	var rec ringbuf.Record
	lastPoll := time.Now()
	if l.poll > 0 {
		l.rd.SetDeadline(lastPoll.Add(l.poll))
	}
	for n := 1; ; n++ {
		err := l.rd.ReadInto(&rec)
		switch {
		case err == nil:
			handle(&rec)
			if l.onPoll != nil && n&1023 == 0 && time.Since(lastPoll) > l.poll {
				l.onPoll()
				lastPoll = time.Now()
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			if l.onPoll != nil {
				l.onPoll()
			}
			lastPoll = time.Now()
			l.rd.SetDeadline(lastPoll.Add(l.poll))
		case errors.Is(err, ringbuf.ErrFlushed):
			// Every record read before this was handed on (this
			// goroutine hands each on before it reads the next).
			if l.onFlush != nil {
				l.onFlush()
			}
			l.answer()
		case errors.Is(err, ringbuf.ErrClosed):
			return
		default:
			report(err)
		}
	}
}

func (l *Loop) answer() {
	l.mu.Lock()
	if l.flushed != nil {
		close(l.flushed)
		l.flushed = nil
	}
	l.mu.Unlock()
}

// Sync returns once every record in the ring when it was called has been
// handed to Run's handle (and OnFlush has run), or ctx ends. Syncs take
// turns: each flush is answered by its own ErrFlushed (the reader's
// flush signal is one counter, so two flushes in flight could be
// answered by one read-through that began before the second). A Sync
// whose ctx ended leaves its flush in flight; the next one may then be
// answered by it, early.
func (l *Loop) Sync(ctx context.Context) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	select {
	case <-l.done:
		return ErrClosed
	default:
	}
	ch := make(chan struct{})
	l.mu.Lock()
	l.flushed = ch
	l.mu.Unlock()
	if err := l.rd.Flush(); err != nil {
		return fmt.Errorf("flush the ring: %w", err)
	}
	select {
	case <-ch:
		return nil
	case <-l.done:
		return ErrClosed
	case <-ctx.Done():
		l.mu.Lock()
		if l.flushed == ch {
			l.flushed = nil
		}
		l.mu.Unlock()
		return ctx.Err()
	}
}
