package hashchain

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
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

// Writer appends lines to one chain file. It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	head Head
	sync bool
}

// Option configures Open.
type Option func(*Writer)

// WithoutSync skips the fsync after each append (tests and benchmarks; a
// crash may then lose acknowledged lines).
func WithoutSync() Option { return func(w *Writer) { w.sync = false } }

// Open opens (creating if needed, mode 0600) the chain at path, verifies it,
// cuts off a torn last line and positions the head after the last line.
func Open(path string, opts ...Option) (*Writer, error) {
	w := &Writer{sync: true}
	for _, o := range opts {
		o(w)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	head, good, err := scan(f, false, nil)
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
	w.f, w.head = f, head
	return w, nil
}

// Head returns the current head.
func (w *Writer) Head() Head {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.head
}

// Append builds the next line with build (given the head it must link to),
// checks the link, writes it with a newline and (unless WithoutSync) fsyncs.
// build runs under the writer's lock, so the head it sees is the one the
// line is written after.
func (w *Writer) Append(build func(Head) ([]byte, error)) (Head, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line, err := build(w.head)
	if err != nil {
		return w.head, err
	}
	if bytes.IndexByte(line, '\n') >= 0 {
		return w.head, fmt.Errorf("%w: line contains a newline", ErrNotLinked)
	}
	if err := checkLink(line, w.head); err != nil {
		return w.head, fmt.Errorf("%w: %s", ErrNotLinked, err)
	}
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	if _, err := w.f.Write(buf); err != nil {
		return w.head, err
	}
	if w.sync {
		if err := w.f.Sync(); err != nil {
			return w.head, err
		}
	}
	w.head = Head{Seq: w.head.Next(), Hash: Sum(line)}
	return w.head, nil
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}

// Verify reads a whole chain and checks every link; check (may be nil) is
// called with each line (without its newline) and may reject it, for
// example on a bad signature. A torn last line is an error here: Verify is
// for finished files; Open is what recovers from a crash.
func Verify(r io.Reader, check func(seq uint64, line []byte) error) (Head, error) {
	head, _, err := scan(r, true, check)
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
func scan(r io.Reader, strict bool, check func(uint64, []byte) error) (Head, int64, error) {
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
		head = Head{Seq: head.Next(), Hash: Sum(body)}
		off += int64(len(line))
	}
}

func checkLink(line []byte, head Head) error {
	var l link
	if err := json.Unmarshal(line, &l); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	switch {
	case l.Seq == nil || l.Prev == nil:
		return errors.New(`missing "seq" or "prev"`)
	case *l.Seq != head.Next():
		return fmt.Errorf("seq %d, want %d", *l.Seq, head.Next())
	case *l.Prev != head.Hash:
		return fmt.Errorf("prev %.12s… does not match the previous line's hash %.12s…", *l.Prev, head.Hash)
	}
	return nil
}

// Sync flushes appended lines to stable storage; with WithoutSync it is how
// a caller that batches appends makes a whole batch durable with one fsync.
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Sync()
}
