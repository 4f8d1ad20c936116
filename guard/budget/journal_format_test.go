package budget

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"slices"
	"testing"
)

func testSet(n uint64) *applySet {
	return &applySet{
		grants: []*grantState{
			{key: Key{"cap", 1}, limits: Limits{Currency: "USD", PerInvocation: u(5), Total: u(100), MaxInvocations: 7}, depth: 0, root: "cap", tool: "t", server: "s", invocations: n, charged: 3 * n},
			{key: Key{"child", 0}, limits: Limits{Currency: "EUR"}, parent: &Key{"cap", 1}, depth: 1, root: "cap", tool: "t2", invocations: 1 << 63, charged: 1<<64 - 1},
		},
		holds:  []*holdState{{id: "hold-1", key: Key{"cap", 1}, reserved: 9, open: true, tool: "t"}, {id: "hold-0", key: Key{"child", 0}, open: false}},
		events: []evRow{{id: n, body: []byte(`{"a":1}`)}, {id: n + 1, body: bytes.Repeat([]byte("x"), 300)}},
	}
}

func TestJournalRecordRoundTrip(t *testing.T) {
	set := testSet(4)
	rec := appendRecord(nil, 7, 9, set)
	got, n, err := parseRecord(append(rec, 0, 0, 0), 7, 9)
	if err != nil || n != len(rec) {
		t.Fatalf("parse: %v, %d of %d bytes", err, n, len(rec))
	}
	if again := appendRecord(nil, 7, 9, got); !bytes.Equal(again, rec) {
		t.Fatal("a parsed record does not encode back to the same bytes")
	}
	for _, want := range []struct{ epoch, seq uint64 }{{6, 9}, {7, 8}, {7, 10}} {
		if _, _, err := parseRecord(rec, want.epoch, want.seq); !errors.Is(err, errNoRecord) {
			t.Fatalf("record (7, 9) read as (%d, %d): %v", want.epoch, want.seq, err)
		}
	}
	for i := range rec { // every torn length and every flipped byte is no record
		if _, _, err := parseRecord(rec[:i], 7, 9); !errors.Is(err, errNoRecord) {
			t.Fatalf("record torn at %d of %d: %v", i, len(rec), err)
		}
		bad := bytes.Clone(rec)
		bad[i] ^= 0x10
		if _, _, err := parseRecord(bad, 7, 9); !errors.Is(err, errNoRecord) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
}

// A record whose checksum holds but which does not decode is damage, not a
// torn tail: replay refuses to go on rather than drop answered decisions.
func TestJournalUndecodableRecordIsAnError(t *testing.T) {
	rec := append(appendRecord(nil, 1, 1, testSet(1)), 0xff) // a byte past the payload's end
	binary.LittleEndian.PutUint32(rec[4:], binary.LittleEndian.Uint32(rec[4:])+1)
	binary.LittleEndian.PutUint32(rec, crc32.Checksum(rec[4:], castagnoli))
	if _, err := scanJournal(rec, 1, 0, 0); err == nil || errors.Is(err, errNoRecord) {
		t.Fatalf("want a decode error, got %v", err)
	}
}

// Replay takes the records after SQLite's position, in seq order, going
// round the ring, and stops at the first one that is not there: a torn
// record hides the intact ones after it (they were never answered), and
// records of another epoch are never taken.
func TestJournalScan(t *testing.T) {
	var data []byte
	var ends []int64
	for seq := uint64(1); seq <= 4; seq++ {
		data = appendRecord(data, 3, seq, testSet(seq))
		ends = append(ends, int64(len(data)))
	}
	data = append(data, make([]byte, 100)...)
	seqs := func(rs []replayed) (out []uint64) {
		for _, r := range rs {
			out = append(out, r.seq)
		}
		return out
	}
	check := func(name string, data []byte, epoch, after uint64, off int64, want ...uint64) {
		t.Helper()
		rs, err := scanJournal(data, epoch, after, off)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := seqs(rs); !slices.Equal(got, want) {
			t.Fatalf("%s: replayed %v, want %v", name, got, want)
		}
	}
	check("whole", data, 3, 0, 0, 1, 2, 3, 4)
	check("after 2", data, 3, 2, ends[1], 3, 4)
	check("other epoch", data, 4, 0, 0)
	check("all applied", data, 3, 4, ends[3])
	torn := bytes.Clone(data)
	torn[ends[1]+30] ^= 1 // record 3
	check("torn 3", torn, 3, 0, 0, 1, 2)
	tail := bytes.Clone(data[:ends[3]-5])
	check("torn tail", tail, 3, 0, 0, 1, 2, 3)
	// Record 5 did not fit after 4 and went to the start of the ring.
	wrapped := bytes.Clone(data)
	r5 := appendRecord(nil, 3, 5, testSet(5))
	copy(wrapped, r5)
	check("wrapped", wrapped, 3, 3, ends[2], 4, 5)
	check("wrapped, position past the end", wrapped, 3, 4, int64(len(wrapped)), 5)
	// A stale record of the right seq but an older epoch at the start.
	check("stale epoch", wrapped, 4, 4, ends[3])
}

func FuzzJournalScan(f *testing.F) {
	var data []byte
	for seq := uint64(1); seq <= 3; seq++ {
		data = appendRecord(data, 1, seq, testSet(seq))
	}
	f.Add(data, uint64(0), int64(0))
	f.Add(data[:len(data)-7], uint64(1), int64(40))
	f.Add(appendRecord(nil, 1, 1, &applySet{}), uint64(0), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, after uint64, off int64) {
		rs, err := scanJournal(data, 1, after, off)
		if err != nil {
			return
		}
		for i, r := range rs {
			if r.seq != after+uint64(i)+1 || r.end <= 0 || r.end > int64(len(data)) {
				t.Fatalf("record %d: seq %d end %d", i, r.seq, r.end)
			}
			rec := appendRecord(nil, 1, r.seq, r.set)
			if start := r.end - int64(len(rec)); start < 0 || !bytes.Equal(data[start:r.end], rec) {
				t.Fatalf("record %d does not encode back to the bytes it was read from", r.seq)
			}
		}
	})
}

// FuzzJournalPayload reaches the payload decoder, which FuzzJournalScan's
// random bytes seldom do (they would need a matching checksum).
func FuzzJournalPayload(f *testing.F) {
	f.Add(appendSet(nil, testSet(3)))
	f.Add(appendSet(nil, &applySet{}))
	f.Fuzz(func(t *testing.T, payload []byte) {
		set, err := parseSet(payload)
		if err != nil {
			return
		}
		again, err := parseSet(appendSet(nil, set))
		if err != nil || !reflect.DeepEqual(normalize(again), normalize(set)) {
			t.Fatalf("a decoded payload does not survive encoding: %v", err)
		}
	})
}

// normalize makes empty and nil byte slices alike for comparison.
func normalize(set *applySet) *applySet {
	for i := range set.events {
		if len(set.events[i].body) == 0 {
			set.events[i].body = nil
		}
	}
	return set
}
