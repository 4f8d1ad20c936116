package ringsync

import (
	"context"
	"errors"
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

// TestPollReadsRecordsThatWokeNobody: records written with
// BPF_RB_NO_WAKEUP (allowed operations below a wakeup threshold) reach the
// handler within the poll interval with no Sync; the poll function runs;
// OnFlush runs before Sync returns; Sync after the reader closed says so.
func TestPollReadsRecordsThatWokeNobody(t *testing.T) {
	testutil.RequirePrivileged(t)
	rb, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	prog := testutil.RingWriterFlags(t, rb, 1)
	rd, err := ringbuf.NewReader(rb)
	if err != nil {
		t.Fatal(err)
	}
	var polls, flushes atomic.Int64
	handled := make(chan struct{}, 16)
	l := New(rd, WithPoll(5*time.Millisecond, func() { polls.Add(1) }), OnFlush(func() { flushes.Add(1) }))
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(func(*ringbuf.Record) { handled <- struct{}{} }, func(err error) { t.Errorf("read: %v", err) })
	}()
	// Once the loop has polled, it waits in the ring: the record below
	// is written to a waiting reader it does not wake.
	for deadline := time.Now().Add(10 * time.Second); polls.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the poll function never ran")
		}
	}
	if _, _, err := prog.Test(make([]byte, 14)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("a record that woke nobody was never read")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Sync(ctx); err != nil || flushes.Load() != 1 {
		t.Fatalf("Sync: %v, OnFlush ran %d times before it returned, want 1", err, flushes.Load())
	}
	rd.Close()
	<-done
	if err := l.Sync(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after the reader closed: %v, want ErrClosed", err)
	}
}
