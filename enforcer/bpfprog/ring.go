//go:build linux

package bpfprog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/klocklabs/klock/internal/ringsync"
)

// Ring is one ring buffer map read in order by one goroutine, and the
// goroutines that work beside it until Close.
type Ring struct {
	rd   *ringbuf.Reader
	loop *ringsync.Loop
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

// OpenRing opens a reader of m (a BPF_MAP_TYPE_RINGBUF); errors wrap
// sentinel.
func OpenRing(m *ebpf.Map, sentinel error) (*Ring, error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("%w: ring buffer reader: %w", sentinel, err)
	}
	return &Ring{rd: rd, loop: ringsync.New(rd), done: make(chan struct{})}, nil
}

// Read starts the reading goroutine: handle gets every record in order
// (the record is reused: copy what is kept), report every read error
// (the loop goes on) until Close.
func (r *Ring) Read(handle func(*ringbuf.Record), report func(error)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.loop.Run(handle, report)
	}()
}

// Every runs f every d beside the reader until Close.
func (r *Ring) Every(d time.Duration, f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-r.done:
				return
			case <-t.C:
				f()
			}
		}
	}()
}

// Sync returns once every record the kernel wrote before the call has
// been handed to Read's handle.
func (r *Ring) Sync(ctx context.Context) error { return r.loop.Sync(ctx) }

// Close stops Every's goroutines and the reader and waits for them; the
// objects the programs write through can be closed after it. A second
// Close returns the first's result.
func (r *Ring) Close() error {
	r.once.Do(func() {
		close(r.done)
		r.err = r.rd.Close()
		r.wg.Wait()
	})
	return r.err
}
