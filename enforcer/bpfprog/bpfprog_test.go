//go:build linux

package bpfprog

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/internal/ringsync"
	"github.com/klocklabs/klock/internal/testutil"
)

var errTest = errors.New("test: load")

// TestLoadSaysWhatTheVerifierSaid: a program the verifier refuses (it
// never sets R0) fails with the caller's sentinel and the verifier's log.
func TestLoadSaysWhatTheVerifierSaid(t *testing.T) {
	testutil.RequirePrivileged(t)
	err := Load(errTest, func(opts *ebpf.CollectionOptions) error {
		spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"bad": {
			Type: ebpf.SocketFilter, License: "GPL", Instructions: asm.Instructions{asm.Return()},
		}}}
		coll, err := ebpf.NewCollectionWithOptions(spec, *opts)
		if err == nil {
			coll.Close()
		}
		return err
	})
	if !errors.Is(err, errTest) || !strings.Contains(err.Error(), "verifier") || !strings.Contains(err.Error(), "R0") {
		t.Fatalf("Load of a refused program: %v; want the sentinel and the verifier's log (R0 !read_ok)", err)
	}
}

// TestRingHandsEveryRecordBeforeSyncReturns: records a real program wrote
// reach Read's handler in order, all of them before Sync returns; the
// poll runs beside it; Close stops both and a second Close says the same.
func TestRingHandsEveryRecordBeforeSyncReturns(t *testing.T) {
	testutil.RequirePrivileged(t)
	if err := Memlock(errTest); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prog := testutil.RingWriter(t, m)
	ticks := make(chan struct{}, 1)
	r, err := OpenRing(m, errTest, ringsync.WithPoll(time.Millisecond, func() {
		select {
		case ticks <- struct{}{}:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan uint64, 16) // read by this goroutine only after Sync
	r.Read(func(rec *ringbuf.Record) { got <- binary.NativeEndian.Uint64(rec.RawSample) }, func(err error) { t.Error(err) })
	for range 3 {
		if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 14)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d records handed on before Sync returned, want 3", len(got))
	}
	for range 3 {
		if v := <-got; v != 42 {
			t.Fatalf("record %d, want 42", v)
		}
	}
	select {
	case <-ticks:
	case <-ctx.Done():
		t.Fatal("the poll never ran")
	}
	err = r.Close()
	if err2 := r.Close(); err != nil || err2 != nil {
		t.Fatalf("Close: %v, again: %v", err, err2)
	}
	if err := r.Sync(ctx); !errors.Is(err, ringsync.ErrClosed) {
		t.Fatalf("Sync after Close: %v, want ringsync.ErrClosed", err)
	}
}

// TestLossesDeliverWithoutBlocking: drops and the kernel's counter add up,
// a full channel keeps the count for the next delivery, and the kernel's
// counter is taken as a total (read twice, counted once).
func TestLossesDeliverWithoutBlocking(t *testing.T) {
	var l Losses
	ch := make(chan event.Lost, 1)
	send := LostTo(ch)
	l.Dropped()
	l.Kernel(5)
	l.Kernel(5)
	l.Deliver(send)
	if n := (<-ch).Count; n != 6 || l.Pending() != 0 {
		t.Fatalf("delivered %d, pending %d; want 6, 0", n, l.Pending())
	}
	ch <- event.Lost{} // full
	l.Kernel(7)
	l.Deliver(send)
	if l.Pending() != 2 {
		t.Fatalf("pending %d after a full channel, want 2 kept", l.Pending())
	}
	<-ch
	l.Deliver(send)
	if n := (<-ch).Count; n != 2 {
		t.Fatalf("delivered %d, want 2", n)
	}
	l.Deliver(func(uint64) bool { t.Fatal("nothing pending, yet delivered"); return true })
}

// Programs reads a bpf2go programs struct by its tags, leaving out the
// programs not loaded and fields that are not programs.
func TestPrograms(t *testing.T) {
	a := &ebpf.Program{}
	got := Programs(&struct {
		A     *ebpf.Program `ebpf:"prog_a"`
		B     *ebpf.Program `ebpf:"prog_b"`
		NoTag *ebpf.Program
		M     *ebpf.Map `ebpf:"a_map"`
	}{A: a, NoTag: a})
	if len(got) != 1 || got["prog_a"] != a {
		t.Fatalf("Programs = %v", got)
	}
}
