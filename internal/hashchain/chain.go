package hashchain

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/klocklabs/klock/internal/writeout"
)

// ErrBroken is matched by every *BrokenError.
var ErrBroken = errors.New("hash chain broken")

// ErrNotLinked is returned by Append when the built line does not carry the
// seq and prev of the head it was given.
var ErrNotLinked = errors.New("line does not link to the chain head")

// BrokenError says where and why a chain stopped verifying.
type BrokenError struct {
	Line   int // 1-based line number in the file
	Reason string
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("%s at line %d: %s", ErrBroken, e.Line, e.Reason)
}

func (e *BrokenError) Is(target error) bool { return target == ErrBroken }

// Head is the chain position a new line links to.
type Head struct {
	Seq  uint64 // seq of the last line (0 for an empty chain)
	Hash string // hex SHA-256 of the last line ("" for an empty chain)
}

// Next is the seq the next line must carry.
func (h Head) Next() uint64 { return h.Seq + 1 }

// link is the part of every line the chain owns.
type link struct {
	Seq  *uint64 `json:"seq"`
	Prev *string `json:"prev"`
}

// Sum is the hash the next line's "prev" must carry after line.
func Sum(line []byte) string {
	s := sha256.Sum256(line)
	return hex.EncodeToString(s[:])
}

// ErrFailed is matched by the error of every append after a write or an
// fsync of the chain failed: the file's tail is then unknown (Linux may
// even drop the unsynced pages and forget the error), so nothing more is
// appended until the chain is reopened, which verifies it and cuts any torn
// tail.
var ErrFailed = errors.New("chain writer failed earlier")

// DeferredSyncDelay bounds how long a line appended with AppendDeferred
// waits for a durable append to carry it to disk before the writer syncs it
// on its own.
const DeferredSyncDelay = 2 * time.Millisecond

// maxKeptBuf is how much more than a write needs the writer's kept buffer
// may be before it is dropped for a smaller one.
const maxKeptBuf = 1 << 20

// Writer appends lines to one chain file. It is safe for concurrent use.
//
// Durable appends use group commit: an appender writes its line under the
// lock, then waits until an fsync that started after its write has
// finished. The first waiter to find no fsync running runs one (the
// leader) for every line written so far; appenders that write meanwhile
// wait for the leader to finish and the next leader syncs them all. Each
// Append still returns only once its own line is on stable storage, but
// concurrent appenders share fsyncs. Because the file is append-only and an
// fsync covers everything written before it, a durable line implies every
// earlier line is durable: a crash can only lose a suffix of the chain.
type Writer struct {
	mu     sync.Mutex // guards everything below; released during fsync
	cond   *sync.Cond // signalled when an fsync ends
	f      *os.File
	head   Head
	sync   bool
	linker Linker

	durable  uint64 // every line up to this seq is on stable storage
	end      int64  // file offset after the last line written
	synced   int64  // every byte before this offset is on stable storage
	syncing  bool   // a leader is in fsync
	deferred bool   // a deferred sync is scheduled
	closed   bool
	err      error  // sticky: a write or fsync failed
	buf      []byte // the last write's bytes, reused (see writeLines)

	each func(seq uint64, line []byte) error // WithEachLine's, at Open

	fsync func(*os.File) error // (*os.File).Sync; tests count and fail it
}

// Option configures Open.
type Option func(*Writer)

// WithoutSync skips the fsync after each append (tests and benchmarks; a
// crash may then lose acknowledged lines). Sync still syncs.
func WithoutSync() Option { return func(w *Writer) { w.sync = false } }

// WithEachLine has Open hand every complete line it verifies to f (its
// seq, and the line without its newline, valid only during the call): a
// reader of the chain at start-up shares Open's pass over the file. An
// error from f stops Open with a BrokenError at that line.
func WithEachLine(f func(seq uint64, line []byte) error) Option {
	return func(w *Writer) { w.each = f }
}

// Linker returns the bytes of a line that the next line's "prev" hashes.
// The default (nil) is the whole line. A chain written with a linker must
// be verified with the same linker (VerifyWith).
type Linker func(line []byte) ([]byte, error)

// WithLinker sets the chain's linker.
func WithLinker(l Linker) Option { return func(w *Writer) { w.linker = l } }

// digest is the hash the next line's prev must carry after line.
func digest(l Linker, line []byte) (string, error) {
	if l == nil {
		return Sum(line), nil
	}
	part, err := l(line)
	if err != nil {
		return "", err
	}
	return Sum(part), nil
}

// Open opens (creating if needed, mode 0600) the chain at path, verifies it,
// cuts off a torn last line and positions the head after the last line.
func Open(path string, opts ...Option) (*Writer, error) {
	w := &Writer{sync: true, fsync: (*os.File).Sync}
	for _, o := range opts {
		o(w)
	}
	w.cond = sync.NewCond(&w.mu)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	head, good, err := scan(f, false, w.linker, w.each)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	// What was on disk before is treated as durable: it was fsynced by
	// whoever acknowledged it, and a line that was not cannot be told apart.
	w.f, w.head, w.durable, w.end, w.synced = f, head, head.Seq, good, good
	return w, nil
}

// Head returns the current head.
func (w *Writer) Head() Head {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.head
}

// Append builds the next line with build (given the head it must link to),
// checks the link, writes it with a newline and (unless WithoutSync) waits
// until it is on stable storage, sharing the fsync with concurrent
// appenders. build runs under the writer's lock, so the head it sees is the
// one the line is written after.
func (w *Writer) Append(build func(Head) ([]byte, error)) (Head, error) {
	return w.append(build, w.sync)
}

// AppendDeferred is Append without waiting for the fsync: it returns once
// the line is written to the file (so a crash of this process does not lose
// it; a crash of the machine may). The line becomes durable no later than
// the next durable Append or Sync returns, and at most DeferredSyncDelay
// plus one fsync after this call otherwise. If that fsync fails, every later
// append fails (ErrFailed). Without WithoutSync nothing is synced, as with
// Append.
func (w *Writer) AppendDeferred(build func(Head) ([]byte, error)) (Head, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, err := w.writeLocked(func(h Head) ([][]byte, error) {
		line, err := build(h)
		return [][]byte{line}, err
	})
	if err != nil || !w.sync || w.deferred {
		return h, err
	}
	w.deferred = true
	time.AfterFunc(DeferredSyncDelay, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.deferred = false
		if !w.closed {
			_ = w.syncLocked(w.head.Seq) // a failure is sticky: the next append reports it
		}
	})
	return h, nil
}

// AppendAll appends several lines with one write (and, unless WithoutSync,
// one wait for durability). build is given the head the first line links
// to and returns the lines in order; each must link to the one before. It
// runs under the writer's lock. Either every line is written or none is.
func (w *Writer) AppendAll(build func(Head) ([][]byte, error)) (Head, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, err := w.writeLocked(build)
	if err != nil || !w.sync {
		return h, err
	}
	return h, w.syncLocked(h.Seq)
}

// Linked is lines a builder linked itself, with the head after the last.
type Linked struct {
	Lines [][]byte
	Head  Head
}

// AppendLinked is AppendAll for a builder that links its lines itself and
// already knows the hash of each: the writer takes the head build returns
// instead of reading every line's seq and prev back and hashing it again,
// which for ~1 KiB receipts was a tenth of a budget decision's CPU. It
// still refuses a line with a newline. A builder that links wrongly writes
// a chain that Open and Verify reject, so it must be tested against
// VerifyWith (the receipt log's is: guard/receipt).
func (w *Writer) AppendLinked(build func(Head) (Linked, error)) (Head, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return w.head, err
	}
	l, err := build(w.head)
	if err != nil {
		return w.head, err
	}
	if len(l.Lines) == 0 {
		return w.head, nil
	}
	if l.Head.Seq != w.head.Seq+uint64(len(l.Lines)) {
		return w.head, fmt.Errorf("%w: %d lines end at seq %d, want %d", ErrNotLinked, len(l.Lines), l.Head.Seq, w.head.Seq+uint64(len(l.Lines)))
	}
	h, err := w.writeLines(l.Lines, l.Head)
	if err != nil || !w.sync {
		return h, err
	}
	return h, w.syncLocked(h.Seq)
}

func (w *Writer) append(build func(Head) ([]byte, error), durable bool) (Head, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, err := w.writeLocked(func(h Head) ([][]byte, error) {
		line, err := build(h)
		return [][]byte{line}, err
	})
	if err != nil || !durable {
		return h, err
	}
	return h, w.syncLocked(h.Seq)
}

// writeLocked builds, checks and writes lines. Caller holds w.mu.
func (w *Writer) writeLocked(build func(Head) ([][]byte, error)) (Head, error) {
	if err := w.usable(); err != nil {
		return w.head, err
	}
	lines, err := build(w.head)
	if err != nil {
		return w.head, err
	}
	head := w.head
	for _, line := range lines {
		if err := checkLink(line, head); err != nil {
			return w.head, fmt.Errorf("%w: %s", ErrNotLinked, err)
		}
		d, err := digest(w.linker, line)
		if err != nil {
			return w.head, fmt.Errorf("%w: %s", ErrNotLinked, err)
		}
		head = Head{Seq: head.Next(), Hash: d}
	}
	return w.writeLines(lines, head)
}

// writeLines writes lines, each with a newline, in one write and makes
// head the writer's head. Caller holds w.mu.
//
// The write's buffer is kept for the next one: the budget ledger appends
// a few hundred KiB of receipts a second, and a fresh buffer per write
// was a seventh of all it allocated, so of its garbage collections, which
// on two cores take CPU from the decisions callers wait on.
func (w *Writer) writeLines(lines [][]byte, head Head) (Head, error) {
	size := 0
	for _, line := range lines {
		if bytes.IndexByte(line, '\n') >= 0 {
			return w.head, fmt.Errorf("%w: line contains a newline", ErrNotLinked)
		}
		size += len(line) + 1
	}
	if size == 0 {
		return w.head, nil
	}
	buf := w.buf[:0]
	if cap(buf) < size || cap(buf) > 4*size+maxKeptBuf {
		// Not kept when far too large: one huge batch would otherwise
		// pin its buffer for good.
		buf = make([]byte, 0, size)
	}
	for _, line := range lines {
		buf = append(append(buf, line...), '\n')
	}
	w.buf = buf
	if _, err := w.f.Write(buf); err != nil {
		// Part of buf may be in the file: stop here (Open cuts a torn tail).
		w.err = err
		return w.head, err
	}
	w.end += int64(len(buf))
	w.head = head
	return head, nil
}

func (w *Writer) usable() error {
	switch {
	case w.closed:
		return fmt.Errorf("%w: closed", ErrFailed)
	case w.err != nil:
		return fmt.Errorf("%w: %v", ErrFailed, w.err)
	}
	return nil
}

// syncLocked returns once every line up to seq is on stable storage (or an
// fsync failed). Caller holds w.mu; it is released while fsync runs.
func (w *Writer) syncLocked(seq uint64) error {
	for w.durable < seq {
		if w.err != nil {
			return fmt.Errorf("%w: %v", ErrFailed, w.err)
		}
		if w.syncing {
			w.cond.Wait()
			continue
		}
		// Lead: sync everything written so far, including lines other
		// appenders wrote while the previous fsync ran.
		target, from, to := w.head.Seq, w.synced, w.end
		w.syncing = true
		w.mu.Unlock()
		err := w.syncRange(from, to)
		w.mu.Lock()
		w.syncing = false
		if err != nil {
			w.err = err
		} else if target > w.durable {
			w.durable, w.synced = target, max(w.synced, to)
		}
		w.cond.Broadcast()
	}
	return nil
}

// syncRange makes the file durable up to offset to, from having been
// durable up to from. More than a piece of unsynced lines (a caller that
// syncs seldom, like the budget ledger's receipt log: some MiB every
// 200 ms) is first written out a piece at a time (package writeout), so
// that the fsync does not hand the disk the whole burst at once and other
// small fsyncs of the process wait behind one piece, not all of it.
func (w *Writer) syncRange(from, to int64) error {
	if to-from > writeout.Chunk {
		if err := writeout.Range(w.f, from, to); err != nil {
			return err
		}
	}
	return w.fsync(w.f)
}

// Sync returns once every line appended so far is on stable storage; with
// WithoutSync it is how a caller that batches appends makes a whole batch
// durable with one fsync.
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	return w.syncLocked(w.head.Seq)
}

// Close syncs what deferred appends left unsynced (unless WithoutSync) and
// closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	var err error
	if w.sync && w.err == nil {
		err = w.syncLocked(w.head.Seq)
	}
	for w.syncing { // a leader still holds the file
		w.cond.Wait()
	}
	w.closed = true
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Verify reads a whole chain and checks every link; check (may be nil) is
// called with each line (without its newline) and may reject it, for
// example on a bad signature. A torn last line is an error here: Verify is
// for finished files; Open is what recovers from a crash.
func Verify(r io.Reader, check func(seq uint64, line []byte) error) (Head, error) {
	return VerifyWith(r, nil, check)
}

// VerifyWith is Verify for a chain written WithLinker(l).
func VerifyWith(r io.Reader, l Linker, check func(seq uint64, line []byte) error) (Head, error) {
	head, _, err := scan(r, true, l, check)
	return head, err
}

// VerifyFile is Verify on the file at path.
func VerifyFile(path string, check func(seq uint64, line []byte) error) (Head, error) {
	f, err := os.Open(path)
	if err != nil {
		return Head{}, err
	}
	defer f.Close()
	return Verify(f, check)
}

// scan walks r line by line. It returns the head after the last complete
// line and that line's end offset. A final line without a newline is a torn
// write: it is an error when strict, else (Open) it is dropped.
func scan(r io.Reader, strict bool, l Linker, check func(uint64, []byte) error) (Head, int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var head Head
	var off int64
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] != '\n' {
			if strict {
				return head, off, &BrokenError{Line: n, Reason: "torn last line (no newline)"}
			}
			return head, off, nil
		}
		if err == io.EOF {
			return head, off, nil
		}
		if err != nil {
			return head, off, err
		}
		body := line[:len(line)-1]
		if err := checkLink(body, head); err != nil {
			return head, off, &BrokenError{Line: n, Reason: err.Error()}
		}
		if check != nil {
			if err := check(head.Next(), body); err != nil {
				return head, off, &BrokenError{Line: n, Reason: err.Error()}
			}
		}
		d, err := digest(l, body)
		if err != nil {
			return head, off, &BrokenError{Line: n, Reason: err.Error()}
		}
		head = Head{Seq: head.Next(), Hash: d}
		off += int64(len(line))
	}
}

func checkLink(line []byte, head Head) error {
	seq, prev, err := readLink(line)
	if err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	switch {
	case seq == nil || prev == nil:
		return errors.New(`missing "seq" or "prev"`)
	case *seq != head.Next():
		return fmt.Errorf("seq %d, want %d", *seq, head.Next())
	case *prev != head.Hash:
		return fmt.Errorf("prev %.12s… does not match the previous line's hash %.12s…", *prev, head.Hash)
	}
	return nil
}
