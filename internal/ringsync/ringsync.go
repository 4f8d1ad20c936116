// Package ringsync reads a BPF ring buffer in one goroutine and lets others
// wait until every record written before they asked has been handled.
//
// A session ends by reading what its kernel programs reported: a refusal
// still in the ring when the session's log is written is a refusal the log
// never shows (a permissive sendmmsg whose second, refused message only
// the AF_UNIX wall reported was missing from the log under load). Sync
// asks the reader to flush the ring (ringbuf.Reader.Flush): ReadInto then
// returns every record in it, then ErrFlushed, and the loop answers the
// waiters once it has handed each record on.
//
// Errors: Run returns nil when the reader is closed; other read errors are
// passed to the caller's report function and the loop goes on. Sync
// returns the flush's error, or the context's.
package ringsync

import (
	"context"
	"errors"
	"sync"

	"github.com/cilium/ebpf/ringbuf"
)

// Loop is one ring buffer's reading loop.
type Loop struct {
	rd      *ringbuf.Reader
	mu      sync.Mutex
	waiters []chan struct{}
}

// New returns the loop over rd.
func New(rd *ringbuf.Reader) *Loop { return &Loop{rd: rd} }

// Run reads records and hands each to handle, in order, until rd is
// closed. report receives read errors (the loop goes on).
func (l *Loop) Run(handle func(*ringbuf.Record), report func(error)) {
	var rec ringbuf.Record
	for {
		err := l.rd.ReadInto(&rec)
		switch {
		case err == nil:
			handle(&rec)
		case errors.Is(err, ringbuf.ErrFlushed):
			l.answer()
		case errors.Is(err, ringbuf.ErrClosed):
			l.answer()
			return
		default:
			report(err)
		}
	}
}

func (l *Loop) answer() {
	l.mu.Lock()
	w := l.waiters
	l.waiters = nil
	l.mu.Unlock()
	for _, c := range w {
		close(c)
	}
}

// Sync returns once every record in the ring when it was called has been
// handed to Run's handle. Two Syncs at once (klockd ending two sessions)
// can share one flush, the later one answered by the earlier's: it then
// flushes again while the ring still holds records.
func (l *Loop) Sync(ctx context.Context) error {
	for {
		c := make(chan struct{})
		l.mu.Lock()
		l.waiters = append(l.waiters, c)
		err := l.rd.Flush()
		l.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
		if l.rd.AvailableBytes() == 0 {
			return nil
		}
	}
}
