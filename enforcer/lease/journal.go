package lease

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The journal: one JSON record a line, appended under the lock in one
// write each operation. A line without its newline is a write that did not
// finish (its writer was killed): readers leave it alone, and the next
// writer, holding the lock (so the tail's writer is gone), cuts it off
// before appending. Its first line is a snapshot header: the generation
// (how many times the journal was compacted) and how many bytes and lines
// of snapshot follow it. Compacting writes the state as such a file beside
// the journal and renames it over the journal, under the lock; a process
// that still has the old one open reads it to its end (nothing is appended
// to it after the rename), then goes on after the new one's snapshot.

const opSnapshot = "snapshot"

// journalFormat is the format of the records this klock writes, in every
// header. A journal of another format (a klock of another version wrote
// it) is started afresh once nothing can still hold a lease in it (no
// write for staleAfter: every holder heartbeats well within MaxTTL, and a
// grace is at most MaxTTL too); before that, the store refuses with
// ErrFormat.
const journalFormat = 2

const staleAfter = 2 * MaxTTL

// ErrFormat: the journal was written by a klock of another version whose
// sessions may still hold leases.
var ErrFormat = errors.New("lease: host store journal of another format")

// ErrCorrupt: the host store's journal has a line that is not a record
// (a CorruptError says where).
var ErrCorrupt = errors.New("lease: host store journal is corrupt")

// CorruptError locates a corrupt journal line.
type CorruptError struct {
	Path   string
	Offset int64 // of the line's first byte
	Line   int   // 1-based; 0 when not known (read after a compaction)
	Err    error
}

func (e *CorruptError) Error() string {
	at := fmt.Sprintf("byte %d", e.Offset)
	if e.Line > 0 {
		at = fmt.Sprintf("line %d (byte %d)", e.Line, e.Offset)
	}
	return fmt.Sprintf("lease: host store journal %s is corrupt at %s: %v; no lease can be decided from it: "+
		"remove it when no klock session runs (the leases it held are forgotten; the sessions that held them have ended)",
		e.Path, at, e.Err)
}

func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

func (h *Host) journalPath() string { return filepath.Join(h.dir, journalName) }

// catchUpLocked applies what was appended since this process last read.
// locked says whether the flock is held: only then may a torn tail be cut
// off or a journal be made.
func (h *Host) catchUpLocked(locked bool) error {
	if h.bad != nil {
		return h.bad
	}
	if h.reload || h.j == nil {
		return h.loadLocked(locked)
	}
	var st unix.Stat_t
	err := unix.Fstat(int(h.j.Fd()), &st)
	if err == nil && !unreplaced(&st) {
		err = unix.Stat(h.journalPath(), &st)
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			// Removed (an operator, after corruption): start again.
			return h.loadLocked(locked)
		}
		return fmt.Errorf("lease: host store: %w", err)
	}
	if idOf(&st) != h.jID {
		// Compacted: the rest of the old journal first, then the new one
		// after its snapshot (or all of it, when generations were
		// missed).
		if err := h.readLocked(false); err != nil {
			return err
		}
		f, err := openPrivate(h.journalPath(), os.O_RDWR|os.O_APPEND)
		if err != nil {
			return err
		}
		hd, n, err := readHeader(f)
		if err != nil || hd.Gen != h.gen+1 {
			f.Close()
			return h.loadLocked(locked)
		}
		var fst unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
			f.Close()
			return fmt.Errorf("lease: host store: %w", err)
		}
		h.j.Close()
		h.j, h.jID, h.gen = f, idOf(&fst), hd.Gen
		h.off = n + hd.Size
		h.base, h.hist, h.line = h.off, 0, 1+hd.Lines
	} else if st.Size < h.off {
		return h.loadLocked(locked) // cut by someone: read it all again
	} else if st.Size == h.off {
		return nil // nothing appended since: no read
	}
	return h.readLocked(locked)
}

// unreplaced reports whether the journal open as st still is the
// journal: its one name is the journal's, and no compaction marked it
// replaced (compactLocked makes the old one read-only once the new one
// has its name). It saves looking the path up at each operation; when it
// cannot tell (another name links the file, a mode this store does not
// give, an old journal whose compactor died before marking it), the path
// says.
func unreplaced(st *unix.Stat_t) bool {
	return st.Nlink == 1 && st.Mode&0o777 == journalMode
}

// journalMode is a journal's mode; one replaced by a compaction is made
// replacedMode.
const (
	journalMode  = 0o600
	replacedMode = 0o400
)

// readHeader reads the snapshot header of a journal: the record and the
// length of its line.
func readHeader(f *os.File) (record, int64, error) {
	buf := make([]byte, 512)
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return record{}, 0, err
	}
	i := bytes.IndexByte(buf[:n], '\n')
	if i < 0 {
		return record{}, 0, errors.New("no header line")
	}
	var r record
	if err := json.Unmarshal(buf[:i], &r); err != nil || r.Op != opSnapshot {
		return record{}, 0, fmt.Errorf("first line is not a snapshot header")
	}
	return r, int64(i + 1), nil
}

// readLocked applies the complete lines from h.off on.
func (h *Host) readLocked(locked bool) error {
	if h.chunk == nil {
		h.chunk = make([]byte, 64<<10)
	}
	buf, chunk := h.rbuf[:0], h.chunk
	pos := h.off
	if pos == 0 {
		// A whole journal read at the open: one buffer, not one grown a
		// chunk at a time (a snapshot's history is megabytes); not kept.
		// (An operation's catch-up reads what was appended: no stat.)
		if st, err := h.j.Stat(); err == nil && st.Size() > int64(cap(buf)) && st.Size() < 1<<30 {
			buf = make([]byte, 0, st.Size()+int64(len(chunk)))
		}
	}
	defer func() {
		if cap(buf) <= 1<<20 {
			h.rbuf = buf[:0]
		}
	}()
	scanned := 0 // bytes at buf's start known to hold no newline
	for {
		n, err := h.j.ReadAt(chunk, pos)
		buf = append(buf, chunk[:n]...)
		pos += int64(n)
		// Apply the complete lines read so far (a snapshot's history
		// line is hundreds of kilobytes: each chunk's bytes are searched
		// once).
		for {
			i := bytes.IndexByte(buf[scanned:], '\n')
			if i < 0 {
				scanned = len(buf)
				break
			}
			i += scanned
			scanned = 0
			if err := h.applyLine(buf[:i]); err != nil {
				return err
			}
			h.off += int64(i + 1)
			h.line++
			buf = buf[i+1:]
		}
		if err == io.EOF || n == 0 {
			break
		}
		if err != nil {
			return fmt.Errorf("lease: host store: %w", err)
		}
	}
	if len(buf) > 0 && locked {
		// A torn last line: its writer died holding the lock. It never
		// happened; cut it off so that the next line starts clean.
		if err := h.j.Truncate(h.off); err != nil {
			return fmt.Errorf("lease: host store: cutting a torn line: %w", err)
		}
	}
	return nil
}

func (h *Host) corrupt(err error) error {
	h.bad = &CorruptError{Path: h.journalPath(), Offset: h.off, Line: h.line + 1, Err: err}
	return h.bad
}

// endedPrefix begins a snapshot's history line (encodeRecord).
var endedPrefix = []byte(`{"op":"ended",`)

// applyLine decodes, checks and applies one journal line; a snapshot's
// history line is kept to decode when the history is first read
// (endedHistory.read, endedErr).
func (h *Host) applyLine(line []byte) error {
	if h.off > 0 && bytes.HasPrefix(line, endedPrefix) {
		if h.off < h.base {
			h.hist += int64(len(line) + 1)
		}
		h.t.mu.Lock()
		deferred := h.t.ended.deferLine(line, h.off, h.line+1)
		h.t.mu.Unlock()
		if deferred {
			return nil
		}
	}
	var r record
	if err := decodeLine(line, &r); err != nil {
		return h.corrupt(err)
	}
	if err := r.check(h.off == 0); err != nil {
		return h.corrupt(err)
	}
	if r.Op == opSnapshot {
		h.gen, h.base = r.Gen, int64(len(line)+1)+r.Size
		return nil
	}
	h.t.mu.Lock()
	h.t.applyLocked(r)
	h.t.mu.Unlock()
	return nil
}

// check refuses a record that is not one a store writes.
func (r *record) check(first bool) error {
	if (r.Op == opSnapshot) != first {
		if first {
			return errors.New("the first line is not a snapshot header")
		}
		return errors.New("a snapshot header after the first line")
	}
	switch r.Op {
	case opSnapshot:
	case opGrant:
		if len(r.Grants) == 0 && r.Waiter == "" {
			return errors.New("a grant of nothing")
		}
		for _, g := range r.Grants {
			if g == nil {
				return errors.New("a grant of nothing")
			}
			if _, i, ok := parseID(g.First); !ok || i != 0 || len(g.Claims) > maxGrant {
				return fmt.Errorf("grant %q is not one a store makes", g.First)
			}
			if g.Holder.Agent == "" || g.Holder.Session == "" {
				return fmt.Errorf("grant %s has no holder", g.First)
			}
			for _, i := range g.Gone {
				if i < 0 || i >= len(g.Claims) {
					return fmt.Errorf("grant %s: no lease %d", g.First, i)
				}
			}
		}
	case opEnded:
		for i := range r.Leases {
			if l := &r.Leases[i]; l.Holder.Agent == "" || l.Holder.Session == "" {
				return fmt.Errorf("lease %s has no holder", l.ID)
			}
		}
	case opBeat:
		if r.Holder == nil {
			return errors.New("a heartbeat without a holder")
		}
	case opEnd:
		if r.State == Active || len(r.IDs) == 0 {
			return errors.New("an end without a state or leases")
		}
	case opWait:
		if r.Queued == nil || r.Queued.ID == "" {
			return errors.New("a wait without a waiter")
		}
	case opUnwait:
		if r.Waiter == "" {
			return errors.New("an unwait without a waiter")
		}
	default:
		return fmt.Errorf("unknown record %q", r.Op)
	}
	return nil
}

// loadLocked reads the journal from its start into a fresh mirror (made
// when there is none, if locked), then tells subscribers and waiters of
// this process what changed for them meanwhile.
func (h *Host) loadLocked(locked bool) error {
	f, err := openPrivate(h.journalPath(), os.O_RDWR|os.O_APPEND)
	if errors.Is(err, fs.ErrNotExist) && locked {
		f, err = openPrivate(h.journalPath(), os.O_RDWR|os.O_APPEND|os.O_CREATE)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a locked operation will make it
		}
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return fmt.Errorf("lease: host store: %w", err)
	}
	fresh := st.Size == 0 || !hasNewline(f)
	if !fresh {
		if hd, _, err := readHeader(f); err == nil && hd.Format != journalFormat {
			age := time.Since(time.Unix(st.Mtim.Unix()))
			if age < staleAfter || !locked {
				f.Close()
				if age >= staleAfter {
					return nil // a locked operation starts it afresh
				}
				return fmt.Errorf("%w: %s was written by a klock of another version (format %d; this one reads %d), whose sessions may still hold leases: "+
					"end them (their klock run, or klockd) and it is started afresh %s after its last write, or remove it when no klock session runs",
					ErrFormat, h.journalPath(), hd.Format, journalFormat, (staleAfter - age).Round(time.Second))
			}
			fresh = true // nothing in it can still be held
		}
	}
	if fresh {
		if !locked {
			f.Close()
			return nil
		}
		// New, only a torn header, or another format's that nothing can
		// still hold a lease in: begin the first generation.
		hd, _ := json.Marshal(record{Op: opSnapshot, At: time.Now(), Gen: 1, Format: journalFormat})
		if err := f.Truncate(0); err != nil {
			f.Close()
			return fmt.Errorf("lease: host store: %w", err)
		}
		if _, err := f.Write(append(hd, '\n')); err != nil {
			f.Close()
			return fmt.Errorf("lease: host store: %w", err)
		}
	}
	if h.j != nil {
		h.j.Close()
	}
	h.j, h.jID, h.off, h.line, h.gen, h.base, h.hist = f, idOf(&st), 0, 0, 0, 0, 0
	t := h.t
	t.mu.Lock()
	before := t.heldLocked()
	subs := t.subs
	t.subs = map[chan Event]struct{}{} // replaying is not news
	t.resetLocked()
	t.mu.Unlock()
	err = h.readLocked(locked)
	t.mu.Lock()
	defer t.mu.Unlock()
	for ch := range t.subs {
		subs[ch] = struct{}{}
	}
	t.subs = subs
	if err != nil {
		return err
	}
	h.reload = false
	t.reloadedLocked(before, time.Now())
	if b := t.ended.bad; b != nil {
		return h.corruptEnded(b)
	}
	return nil
}

func hasNewline(f *os.File) bool {
	buf := make([]byte, 4096)
	n, _ := f.ReadAt(buf, 0)
	return bytes.IndexByte(buf[:n], '\n') >= 0
}

// encode adds r to the operation's records (the Table's sink while an
// operation runs).
func (h *Host) encode(r record) {
	if h.encErr == nil {
		h.wbuf, h.encErr = encodeRecord(h.wbuf, &r)
		h.recs++
	}
}

// appendLocked journals the records of one operation in one write.
func (h *Host) appendLocked() error {
	if h.encErr != nil {
		return fmt.Errorf("lease: host store: %w", h.encErr)
	}
	if h.recs == 0 {
		return nil
	}
	buf := h.wbuf
	n, err := h.j.Write(buf)
	if err == nil && n < len(buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		_ = h.j.Truncate(h.off) // no torn line of ours for the next writer
		return fmt.Errorf("lease: host store: journaling: %w", err)
	}
	h.off += int64(n)
	h.line += h.recs
	return nil
}

// corruptEnded marks the store corrupt at b, a snapshot's history line
// that did not decode once the history was read (endedHistory.read): as
// if it had been found at the open, no operation decides on the rest and
// no compaction drops the line.
func (h *Host) corruptEnded(b *endedLine) error {
	h.bad = &CorruptError{Path: h.journalPath(), Offset: b.off, Line: b.n, Err: b.err}
	return h.bad
}

// compactLocked replaces the journal by a snapshot of the state.
func (h *Host) compactLocked() error {
	// Encoded under the table's lock: the records name its grants.
	h.t.mu.Lock()
	ended := &h.t.ended
	if !ended.keepUnread() {
		ended.read()
	}
	if b := ended.bad; b != nil {
		h.t.mu.Unlock()
		return h.corruptEnded(b)
	}
	body := h.t.snapshotLocked()
	b := make([]byte, 0, h.base+h.base/2) // about the last snapshot's size
	// The history's unread lines first, as they are (older than the
	// rings'); where they will be, for a line found bad later.
	at := make([][2]int64, len(ended.unread))
	for i := range ended.unread {
		at[i] = [2]int64{int64(len(b)), int64(2 + i)}
		b = append(b, ended.unread[i].line...)
		b = append(b, '\n')
	}
	hist := len(b)
	for i := range body {
		var err error
		if b, err = encodeRecord(b, &body[i]); err != nil {
			h.t.mu.Unlock()
			return err
		}
		if body[i].Op == opEnded {
			hist = len(b) // the history comes first (snapshotLocked)
		}
	}
	h.t.mu.Unlock()
	hd, err := json.Marshal(record{Op: opSnapshot, At: time.Now(), Gen: h.gen + 1, Size: int64(len(b)), Lines: len(at) + len(body), Format: journalFormat})
	if err != nil {
		return err
	}
	tmp := filepath.Join(h.dir, journalName+".new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(append(hd, '\n'), b...)); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	f.Close()
	if err := os.Rename(tmp, h.journalPath()); err != nil {
		os.Remove(tmp)
		return err
	}
	// Marked replaced, for the processes that have it open (unreplaced);
	// should this fail, its link count (none left) says so too.
	_ = h.j.Chmod(replacedMode)
	nf, err := openPrivate(h.journalPath(), os.O_RDWR|os.O_APPEND)
	if err != nil {
		h.reload = true
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(nf.Fd()), &st); err != nil {
		nf.Close()
		h.reload = true
		return err
	}
	h.j.Close()
	h.j, h.jID = nf, idOf(&st)
	h.off, h.base, h.hist = st.Size, st.Size, int64(hist)
	h.gen++
	h.line = 1 + len(at) + len(body)
	h.t.mu.Lock()
	for i := range at {
		if i < len(ended.unread) { // (h.mu held since: still the lines written)
			ended.unread[i].off, ended.unread[i].n = int64(len(hd)+1)+at[i][0], int(at[i][1])
		}
	}
	h.t.mu.Unlock()
	return nil
}
