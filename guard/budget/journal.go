package budget

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/klocklabs/klock/internal/dirsync"
)

// The decision journal is where a group-committed decision becomes durable
// (doc.go). Each batch is one record, written with one pwrite and covered
// by one fdatasync; SQLite gets the same changes later, in larger
// transactions (applier.go), and Open replays the records SQLite lacks.
//
// The file is a ring of fixed size, zero-filled when created, so that
// writing a record overwrites allocated blocks in place: fdatasync then has
// no metadata to commit (measured on the 2-core VM: p50 230 us and 160 us
// of CPU per sync in place, against 450-550 us and 250-330 us appending).
// A record is written at the end of the previous one, or at offset 0 when
// it does not fit before the end of the ring; it never overwrites a record
// whose changes SQLite does not hold durably (the syncer waits for the
// applier instead).
//
// Record: crc32c (4) | payload length (4) | epoch (8) | seq (8) | payload.
// The checksum covers everything after itself. seq numbers batches, one
// more per record; epoch is bumped (durably, in SQLite) by every Open that
// may write, so records left from before a restart, including intact ones
// that came after a torn one and were never answered, cannot be taken for
// new ones. Replay starts after the last record SQLite applied (table
// journal: its epoch, seq and end offset), reads the record there or, if
// that is not the next one, at offset 0, and stops at the first position
// that holds neither: a torn or unwritten tail. Only records whose fsync
// returned were answered, and an fsync covers every record before it, so
// what is dropped was never answered.

const (
	recHeader = 24
	// journalSize is the ring's initial size. At 20,000 decisions/s a
	// record costs some 900 bytes per decision, so 8 MiB is about half a
	// second of decisions; the applier makes them durable in SQLite every
	// applyEvery, well before the ring comes round.
	journalSize = 8 << 20
	// maxEntries bounds each count in a payload (a batch is at most
	// cfg.group decisions; a grant chain at most 65 grants per decision).
	maxEntries = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// applySet is one batch's changes to the ledger's tables.
type applySet struct {
	grants []*grantState
	holds  []*holdState
	events []evRow
}

type evRow struct {
	id   uint64
	body []byte // the receipt's canonical body (receipt.Prepared.Body)
}

// appendRecord appends set framed as record (epoch, seq) to b.
func appendRecord(b []byte, epoch, seq uint64, set *applySet) []byte {
	start := len(b)
	b = append(b, make([]byte, recHeader)...)
	b = appendSet(b, set)
	binary.LittleEndian.PutUint32(b[start+4:], uint32(len(b)-start-recHeader))
	binary.LittleEndian.PutUint64(b[start+8:], epoch)
	binary.LittleEndian.PutUint64(b[start+16:], seq)
	binary.LittleEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b
}

// errNoRecord: the bytes hold no record of the wanted epoch and seq (zeros,
// a torn write, an older record). Any other error is a record whose
// checksum holds but whose payload does not decode: not a torn write but
// damage or a bug, which Open must not paper over.
var errNoRecord = errors.New("no record")

// parseRecord reads record (epoch, seq) at the start of b, returning its
// changes and its length.
func parseRecord(b []byte, epoch, seq uint64) (*applySet, int, error) {
	if len(b) < recHeader {
		return nil, 0, errNoRecord
	}
	n := uint64(binary.LittleEndian.Uint32(b[4:]))
	if n > uint64(len(b)-recHeader) ||
		binary.LittleEndian.Uint64(b[8:]) != epoch || binary.LittleEndian.Uint64(b[16:]) != seq ||
		crc32.Checksum(b[4:recHeader+n], castagnoli) != binary.LittleEndian.Uint32(b) {
		return nil, 0, errNoRecord
	}
	set, err := parseSet(b[recHeader : recHeader+n])
	if err != nil {
		return nil, 0, fmt.Errorf("journal record %d (epoch %d): %w", seq, epoch, err)
	}
	return set, recHeader + int(n), nil
}

// replayed is one record found by scanJournal.
type replayed struct {
	seq uint64
	end int64 // offset after the record
	set *applySet
}

// scanJournal returns the records of epoch after seq, starting at off.
func scanJournal(data []byte, epoch, seq uint64, off int64) ([]replayed, error) {
	var out []replayed
	for {
		seq++
		var set *applySet
		n, err := 0, errNoRecord
		if off >= 0 && off < int64(len(data)) {
			set, n, err = parseRecord(data[off:], epoch, seq)
		}
		if errors.Is(err, errNoRecord) && off != 0 {
			off = 0
			set, n, err = parseRecord(data, epoch, seq)
		}
		if errors.Is(err, errNoRecord) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		off += int64(n)
		out = append(out, replayed{seq: seq, end: off, set: set})
	}
}

// Payload: three counted lists (grants, holds, events) of fields, each an
// unsigned varint or a varint-length-prefixed byte string.

func appendSet(b []byte, set *applySet) []byte {
	b = binary.AppendUvarint(b, uint64(len(set.grants)))
	for _, g := range set.grants {
		b = appendStr(b, g.key.Capability)
		b = binary.AppendUvarint(b, uint64(g.key.Grant))
		b = appendStr(b, g.limits.Currency)
		b = appendOpt(b, g.limits.PerInvocation)
		b = appendOpt(b, g.limits.Total)
		b = binary.AppendUvarint(b, g.limits.MaxInvocations)
		if g.parent != nil {
			b = append(b, 1)
			b = appendStr(b, g.parent.Capability)
			b = binary.AppendUvarint(b, uint64(g.parent.Grant))
		} else {
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, uint64(g.depth))
		b = appendStr(b, g.root)
		b = appendStr(b, g.tool)
		b = appendStr(b, g.server)
		b = binary.AppendUvarint(b, g.invocations)
		b = binary.AppendUvarint(b, g.charged)
	}
	b = binary.AppendUvarint(b, uint64(len(set.holds)))
	for _, h := range set.holds {
		b = appendStr(b, h.id)
		b = appendStr(b, h.key.Capability)
		b = binary.AppendUvarint(b, uint64(h.key.Grant))
		b = binary.AppendUvarint(b, h.reserved)
		if h.open {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = appendStr(b, h.tool)
	}
	b = binary.AppendUvarint(b, uint64(len(set.events)))
	for _, e := range set.events {
		b = binary.AppendUvarint(b, e.id)
		b = binary.AppendUvarint(b, uint64(len(e.body)))
		b = append(b, e.body...)
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendOpt(b []byte, p *uint64) []byte {
	if p == nil {
		return append(b, 0)
	}
	return binary.AppendUvarint(append(b, 1), *p)
}

// decoder reads a payload; the first error sticks and later reads return
// zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("bad %s", what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32(what string) uint32 {
	v := d.uvarint(what)
	if v > 1<<32-1 {
		d.fail(what)
		return 0
	}
	return uint32(v)
}

func (d *decoder) flag(what string) bool {
	if d.err != nil {
		return false
	}
	if len(d.b) == 0 || d.b[0] > 1 {
		d.fail(what)
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(what string) string { return string(d.bytes(what)) }

func (d *decoder) opt(what string) *uint64 {
	if !d.flag(what) {
		return nil
	}
	v := d.uvarint(what)
	return &v
}

// count reads a list length; every entry takes at least one byte, so a
// count beyond what is left is damage, not a large batch.
func (d *decoder) count(what string) int {
	n := d.uvarint(what)
	if d.err == nil && (n > maxEntries || n > uint64(len(d.b))) {
		d.fail(what)
	}
	if d.err != nil {
		return 0
	}
	return int(n)
}

func parseSet(b []byte) (*applySet, error) {
	d := &decoder{b: b}
	set := &applySet{}
	for i, n := 0, d.count("grant count"); i < n && d.err == nil; i++ {
		g := &grantState{}
		g.key.Capability = d.str("grant capability")
		g.key.Grant = d.u32("grant index")
		g.limits.Currency = d.str("grant currency")
		g.limits.PerInvocation = d.opt("grant per-call limit")
		g.limits.Total = d.opt("grant total limit")
		g.limits.MaxInvocations = d.uvarint("grant max invocations")
		if d.flag("grant parent") {
			g.parent = &Key{Capability: d.str("parent capability"), Grant: d.u32("parent index")}
		}
		g.depth = d.u32("grant depth")
		g.root = d.str("grant root holder")
		g.tool = d.str("grant tool")
		g.server = d.str("grant server")
		g.invocations = d.uvarint("grant invocations")
		g.charged = d.uvarint("grant charged")
		set.grants = append(set.grants, g)
	}
	for i, n := 0, d.count("hold count"); i < n && d.err == nil; i++ {
		h := &holdState{}
		h.id = d.str("hold id")
		h.key.Capability = d.str("hold capability")
		h.key.Grant = d.u32("hold index")
		h.reserved = d.uvarint("hold reserved")
		h.open = d.flag("hold open")
		h.tool = d.str("hold tool")
		set.holds = append(set.holds, h)
	}
	for i, n := 0, d.count("event count"); i < n && d.err == nil; i++ {
		e := evRow{id: d.uvarint("event id")}
		e.body = d.bytes("event body")
		set.events = append(set.events, e)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("payload end")
	}
	if d.err != nil {
		return nil, d.err
	}
	return set, nil
}

// journalFile is the ring on disk: written by the syncer only.
type journalFile struct {
	path string
	f    *os.File
	size int64
}

// readJournal returns the journal's bytes (nil if there is none).
func readJournal(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// openJournal opens the ring for writing, creating it zero-filled (and
// extending one that a crash left short) and making that durable, so that
// record writes never change the file's size.
func openJournal(path string) (*journalFile, error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	j := &journalFile{path: path, f: f}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	j.size = st.Size()
	if j.size < journalSize {
		if err := j.grow(journalSize); err != nil {
			f.Close()
			return nil, err
		}
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := dirsync.Sync(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, err
		}
	}
	return j, nil
}

// grow extends the ring with zeros to size and syncs it. Only called while
// no record is waiting for SQLite (the ring holds nothing live).
func (j *journalFile) grow(size int64) error {
	zero := make([]byte, 1<<20)
	for off := j.size; off < size; {
		n := min(int64(len(zero)), size-off)
		if _, err := j.f.WriteAt(zero[:n], off); err != nil {
			return err
		}
		off += n
	}
	if err := j.f.Sync(); err != nil {
		return err
	}
	j.size = size
	return nil
}
