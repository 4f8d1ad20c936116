package hashchain

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func line(h Head, what string) ([]byte, error) {
	return json.Marshal(rec{Seq: h.Next(), Prev: h.Hash, What: what})
}

// countingSync replaces the writer's fsync: it counts calls, records the
// head each call covers, and takes delay (so appenders pile up behind it).
type countingSync struct {
	calls atomic.Int64
	delay time.Duration
	fail  atomic.Bool
}

func (c *countingSync) install(w *Writer) {
	w.fsync = func(f *os.File) error {
		c.calls.Add(1)
		time.Sleep(c.delay)
		if c.fail.Load() {
			return errors.New("injected EIO")
		}
		return f.Sync()
	}
}

func TestGroupCommitSharesFsyncsAndEachAppendIsDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.jsonl")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingSync{delay: 2 * time.Millisecond}
	cs.install(w)
	const appenders, each = 16, 20
	var wg sync.WaitGroup
	for a := 0; a < appenders; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				h, err := w.Append(func(h Head) ([]byte, error) { return line(h, "x") })
				if err != nil {
					t.Error(err)
					return
				}
				// Append returned: the line must be covered by a finished fsync.
				w.mu.Lock()
				d := w.durable
				w.mu.Unlock()
				if d < h.Seq {
					t.Errorf("Append of seq %d returned with only %d durable", h.Seq, d)
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	n := cs.calls.Load()
	t.Logf("%d appends, %d fsyncs", appenders*each, n)
	if n >= appenders*each/2 {
		t.Fatalf("%d fsyncs for %d concurrent appends: not shared", n, appenders*each)
	}
	if h, err := VerifyFile(path, nil); err != nil || h.Seq != appenders*each {
		t.Fatalf("verify: %+v %v", h, err)
	}
}

func TestFailedFsyncIsStickyAndNothingMoreIsWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.jsonl")
	w, _ := Open(path)
	cs := &countingSync{}
	cs.install(w)
	appendN(t, w, 2)
	cs.fail.Store(true)
	if _, err := w.Append(func(h Head) ([]byte, error) { return line(h, "lost") }); err == nil {
		t.Fatal("append succeeded although its fsync failed")
	}
	cs.fail.Store(false) // the disk "recovers": Linux may have dropped the pages, so the writer must not trust it
	before, _ := os.ReadFile(path)
	_, err := w.Append(func(h Head) ([]byte, error) { return line(h, "after") })
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed fsync: %v, want ErrFailed", err)
	}
	if err := w.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync after a failed fsync: %v", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("a failed writer still wrote")
	}
	w.Close()
}

func TestDeferredAppendIsSyncedSoonOrByTheNextDurableAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.jsonl")
	w, _ := Open(path)
	cs := &countingSync{}
	cs.install(w)
	durable := func() uint64 { w.mu.Lock(); defer w.mu.Unlock(); return w.durable }

	// Alone: written at once, synced by the writer within the delay.
	h, err := w.AppendDeferred(func(h Head) ([]byte, error) { return line(h, "result") })
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); !bytes.Contains(data, []byte("result")) {
		t.Fatal("deferred line not written to the file on return")
	}
	deadline := time.Now().Add(DeferredSyncDelay + 2*time.Second)
	for durable() < h.Seq {
		if time.Now().After(deadline) {
			t.Fatalf("deferred line %d never synced", h.Seq)
		}
		time.Sleep(time.Millisecond)
	}

	// Followed at once by a durable append: one fsync covers both, and the
	// timer then finds nothing to do.
	calls := cs.calls.Load()
	w.AppendDeferred(func(h Head) ([]byte, error) { return line(h, "result2") })
	h, err = w.Append(func(h Head) ([]byte, error) { return line(h, "dispatch") })
	if err != nil || durable() < h.Seq {
		t.Fatalf("durable append: %v, durable %d < %d", err, durable(), h.Seq)
	}
	time.Sleep(DeferredSyncDelay + 20*time.Millisecond)
	if got := cs.calls.Load() - calls; got != 1 {
		t.Fatalf("%d fsyncs for a deferred line followed by a durable one, want 1", got)
	}

	// A failed deferred sync makes the next append fail.
	cs.fail.Store(true)
	w.AppendDeferred(func(h Head) ([]byte, error) { return line(h, "result3") })
	time.Sleep(DeferredSyncDelay + 50*time.Millisecond)
	cs.fail.Store(false)
	if _, err := w.Append(func(h Head) ([]byte, error) { return line(h, "dispatch2") }); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed deferred sync: %v", err)
	}
	w.Close()
}

func TestCloseSyncsDeferredLines(t *testing.T) {
	w, _ := Open(filepath.Join(t.TempDir(), "c.jsonl"))
	cs := &countingSync{}
	cs.install(w)
	w.AppendDeferred(func(h Head) ([]byte, error) { return line(h, "x") })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if cs.calls.Load() != 1 {
		t.Fatalf("Close made %d fsyncs, want 1", cs.calls.Load())
	}
	if _, err := w.Append(func(h Head) ([]byte, error) { return line(h, "y") }); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after Close: %v", err)
	}
}

func TestAppendAllIsAllOrNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.jsonl")
	w, _ := Open(path, WithoutSync())
	appendN(t, w, 1)
	_, err := w.AppendAll(func(h Head) ([][]byte, error) {
		a, _ := line(h, "a")
		b, _ := json.Marshal(rec{Seq: h.Next() + 1, Prev: "not the hash of a", What: "b"})
		return [][]byte{a, b}, nil
	})
	if !errors.Is(err, ErrNotLinked) || w.Head().Seq != 1 {
		t.Fatalf("a batch with a bad second link: err %v, head %d", err, w.Head().Seq)
	}
	h, err := w.AppendAll(func(h Head) ([][]byte, error) {
		a, _ := line(h, "a")
		b, _ := line(Head{Seq: h.Next(), Hash: Sum(a)}, "b")
		return [][]byte{a, b}, nil
	})
	if err != nil || h.Seq != 3 {
		t.Fatalf("good batch: %+v %v", h, err)
	}
	w.Close()
	if h, err := VerifyFile(path, nil); err != nil || h.Seq != 3 {
		t.Fatalf("verify: %+v %v", h, err)
	}
}

// A linker makes prev hash part of the line; such a chain verifies only
// with the same linker, and Open continues it.
func TestLinker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.jsonl")
	// Link over everything but the "what" value (a stand-in for a
	// signature that covers the rest).
	l := func(b []byte) ([]byte, error) {
		var r rec
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, err
		}
		r.What = ""
		return json.Marshal(r)
	}
	w, _ := Open(path, WithoutSync(), WithLinker(l))
	for _, what := range []string{"a", "b", "c"} {
		if _, err := w.Append(func(h Head) ([]byte, error) { return line(h, what) }); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	f, _ := os.Open(path)
	defer f.Close()
	if h, err := VerifyWith(f, l, nil); err != nil || h.Seq != 3 {
		t.Fatalf("verify with linker: %+v %v", h, err)
	}
	if _, err := VerifyFile(path, nil); !errors.Is(err, ErrBroken) {
		t.Fatalf("a linker chain verified without its linker: %v", err)
	}
	w, err := Open(path, WithLinker(l))
	if err != nil || w.Head().Seq != 3 {
		t.Fatalf("reopen: %v", err)
	}
	w.Close()
}

// AppendLinked takes the builder's head: a batch whose head is off by a
// line, or that holds a newline, is refused whole; a well-linked one
// continues the chain as AppendAll would.
func TestAppendLinked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.jsonl")
	w, _ := Open(path, WithoutSync())
	appendN(t, w, 1)
	pair := func(h Head) (Linked, error) {
		a, _ := line(h, "a")
		ha := Head{Seq: h.Next(), Hash: Sum(a)}
		b, _ := line(ha, "b")
		return Linked{Lines: [][]byte{a, b}, Head: Head{Seq: ha.Next(), Hash: Sum(b)}}, nil
	}
	_, err := w.AppendLinked(func(h Head) (Linked, error) {
		l, err := pair(h)
		l.Head.Seq--
		return l, err
	})
	if !errors.Is(err, ErrNotLinked) || w.Head().Seq != 1 {
		t.Fatalf("a batch whose head is a line short: err %v, head %d", err, w.Head().Seq)
	}
	_, err = w.AppendLinked(func(h Head) (Linked, error) {
		l, err := pair(h)
		l.Lines[1] = append(l.Lines[1][:len(l.Lines[1]):len(l.Lines[1])], '\n')
		return l, err
	})
	if !errors.Is(err, ErrNotLinked) || w.Head().Seq != 1 {
		t.Fatalf("a batch with a newline: err %v, head %d", err, w.Head().Seq)
	}
	h, err := w.AppendLinked(pair)
	if err != nil || h.Seq != 3 || w.Head() != h {
		t.Fatalf("good batch: %+v %v", h, err)
	}
	appendN(t, w, 1) // checked against the head AppendLinked took
	w.Close()
	if h, err := VerifyFile(path, nil); err != nil || h.Seq != 4 {
		t.Fatalf("verify: %+v %v", h, err)
	}
}
