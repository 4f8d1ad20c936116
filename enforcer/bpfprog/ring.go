//go:build linux

package bpfprog

import (
	"context"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/klocklabs/klock/internal/ringsync"
)

// Ring is one ring buffer map read in order by one goroutine.
type Ring struct {
	rd   *ringbuf.Reader
	loop *ringsync.Loop
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

// OpenRing opens a reader of m (a BPF_MAP_TYPE_RINGBUF) read as opts say
// (ringsync.WithPoll for periodic work beside the records); errors wrap
// sentinel.
func OpenRing(m *ebpf.Map, sentinel error, opts ...ringsync.Option) (*Ring, error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("%w: ring buffer reader: %w", sentinel, err)
	}
	return &Ring{rd: rd, loop: ringsync.New(rd, opts...)}, nil
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

// Sync returns once every record the kernel wrote before the call has
// been handed to Read's handle (ringsync.ErrClosed after Close).
func (r *Ring) Sync(ctx context.Context) error { return r.loop.Sync(ctx) }

// Close stops the reader and waits for it; the objects the programs
// write through can be closed after it. A second Close returns the
// first's result.
func (r *Ring) Close() error {
	r.once.Do(func() {
		r.err = r.rd.Close()
		r.wg.Wait()
	})
	return r.err
}
