package ringsync

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/klocklabs/klock/internal/testutil"
)

// TestSyncWaitsForEveryRecord: records a BPF program wrote before Sync are
// all handed to the handler when Sync returns, however slow the handler
// (a session's end must see its last refusal). The program is a socket
// filter run with BPF_PROG_TEST_RUN, writing one 8-byte record per run.
func TestSyncWaitsForEveryRecord(t *testing.T) {
	testutil.RequirePrivileged(t)
	rb, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	prog := testutil.RingWriter(t, rb)
	rd, err := ringbuf.NewReader(rb)
	if err != nil {
		t.Fatal(err)
	}
	l := New(rd)
	var handled atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(func(*ringbuf.Record) {
			time.Sleep(time.Millisecond) // a slow consumer: the ring fills ahead of it
			handled.Add(1)
		}, func(err error) { t.Errorf("read: %v", err) })
	}()
	const n = 200
	for range n {
		if _, _, err := prog.Test(make([]byte, 14)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := handled.Load(); got != n {
		t.Errorf("Sync returned with %d of %d records handled", got, n)
	}
	rd.Close()
	<-done
}
