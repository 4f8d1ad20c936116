package lsm

import (
	"encoding/binary"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// record builds a ring-buffer record as bpf/lsm.bpf.c lays it out.
func record(op, flags uint32, need1 uint8, p1, p2 string, key *seenKey) []byte {
	b := make([]byte, hdrSize)
	le := binary.LittleEndian
	le.PutUint64(b[8:], 7)      // cgid
	le.PutUint32(b[16:], 100)   // pid
	le.PutUint32(b[20:], 101)   // tid
	le.PutUint32(b[24:], op)    // op
	le.PutUint32(b[28:], flags) // flags
	b[32] = need1
	l1, l2 := 0, 0
	if p1 != "" {
		l1 = len(p1) + 1
	}
	if p2 != "" {
		l2 = len(p2) + 1
	}
	le.PutUint32(b[36:], uint32(l1))
	le.PutUint32(b[40:], uint32(l2))
	copy(b[48:], "agent")
	if key != nil {
		le.PutUint64(b[72:], key.dent)
		le.PutUint64(b[80:], key.mnt)
		le.PutUint64(b[88:], key.ino)
		le.PutUint32(b[96:], key.gen)
		le.PutUint32(b[100:], key.sess)
		le.PutUint32(b[104:], key.rgen)
		le.PutUint16(b[108:], key.op)
		b[110] = key.need
	}
	if p1 != "" {
		b = append(append(b, p1...), 0)
	}
	if p2 != "" {
		b = append(append(b, p2...), 0)
	}
	return b
}

func TestDecodeNamesEachHookAsATriple(t *testing.T) {
	const prov, cons, mut = 1 << policy.Provides, 1 << policy.Consumes, 1 << policy.Mutates
	for _, c := range []struct {
		name          string
		op, flags     uint32
		need          uint8
		p1, p2        string
		triple, extra string
		syscall       string
		blocked       bool
	}{
		{"read", opOpen, 0, cons, "/w/a", "", "CONSUMES FILE:/w/a", "", "file_open", false},
		{"refused write", opOpen, fDenied, mut, "/w/a", "", "MUTATES FILE:/w/a", "", "file_open", true},
		{"creation counts as one for decide", opOpen, fCreated, prov, "/w/n", "", "PROVIDES FILE:/w/n", "", "open", false},
		{"own procfs", opOpen, 0, cons, "/proc/12/status", "", "CONSUMES FILE:/proc/self/status", "", "file_open", false},
		{"exec", opExec, 0, 1 << 6, "/usr/bin/git", "", "PROVIDES PROC:/usr/bin/git", "CONSUMES FILE:/usr/bin/git", "bprm_check_security", false},
		{"link", opLink, 0, prov, "/w/rw/l", "/w/ro", "PROVIDES FILE:/w/rw/l", "CONSUMES FILE:/w/ro", "path_link", false},
		{"rename over", opRename, fReplaces, 1 << policy.Renames, "/w/a", "/w/b", "RENAMES FILE:/w/a", "MUTATES FILE:/w/b", "path_rename", false},
		{"rename to new", opRename, 0, 1 << policy.Renames, "/w/a", "/w/c", "RENAMES FILE:/w/a", "PROVIDES FILE:/w/c", "path_rename", false},
		{"unlink", opUnlink, fDenied, 1 << policy.Deletes, "/etc/hosts", "", "DELETES FILE:/etc/hosts", "", "path_unlink", true},
		{"times", opSetattr, 0, mut, "/w/a", "", "MUTATES FILE:/w/a", "", "inode_setattr", false},
		{"unix socket file", opConnectUnix, fDenied, cons, "/run/x.sock", "", "CONSUMES FILE:/run/x.sock", "", "unix_stream_connect", true},
		{"abstract socket", opConnectAbstract, fDenied, 0, "@bus", "", "CONSUMES NET:@bus:0", "", "socket_connect", true},
		{"raw socket", opSocketRaw, fDenied, 0, "", "", "CONSUMES NET:raw", "", "socket_create", true},
		{"metadata ioctl", opIoctl, fDenied, mut, "/w/ro.txt", "", "MUTATES FILE:/w/ro.txt", "", "file_ioctl", true},
		{"executable mapping", opMmapExec, fDenied, 1 << 6, "/w/rw/x.so", "", "PROVIDES PROC:/w/rw/x.so", "", "mmap_file", true},
		{"mapping made executable", opMprotectExec, fDenied, 1 << 6, "/usr/bin/id", "", "PROVIDES PROC:/usr/bin/id", "", "file_mprotect", true},
		{"unnamed object", opOpen, fDenied | fNoPath1, cons, "", "", "CONSUMES FILE:" + Unnamed, "", "file_open", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, key, ok := decode(record(c.op, c.flags, c.need, c.p1, c.p2, nil))
			if !ok || key != nil {
				t.Fatalf("decode ok=%v key=%v", ok, key)
			}
			if ev.Triple.String() != c.triple || (c.extra != "" && ev.Extra.String() != c.extra) || (c.extra == "" && ev.Extra.Type != 0) {
				t.Errorf("triple %q extra %q, want %q %q", ev.Triple, ev.Extra, c.triple, c.extra)
			}
			if ev.Syscall != c.syscall || ev.Blocked != c.blocked || ev.Source != event.SourceLSM || ev.PID != 100 || ev.Comm != "agent" {
				t.Errorf("event %+v", ev)
			}
			if c.blocked && ev.Errno != 1 {
				t.Errorf("errno %d, want EPERM", ev.Errno)
			}
		})
	}
}

func TestDecodeReturnsTheCountedKey(t *testing.T) {
	want := seenKey{dent: 1, mnt: 2, ino: 3, gen: 4, sess: 5, rgen: 6, op: opOpen, need: 2}
	_, key, ok := decode(record(opOpen, fCounted, 2, "/w/a", "", &want))
	if !ok || key == nil || *key != want {
		t.Fatalf("key %+v, want %+v", key, want)
	}
}

func TestDecodeRefusesMalformedRecords(t *testing.T) {
	good := record(opOpen, 0, 2, "/w/a", "", nil)
	for name, b := range map[string][]byte{
		"unknown op":       record(99, 0, 2, "/w/a", "", nil),
		"op zero":          record(0, 0, 2, "/w/a", "", nil),
		"lengths too long": good[:len(good)-2],
		"short header":     good[:hdrSize-1],
	} {
		if _, _, ok := decode(b); ok {
			t.Errorf("%s: decoded", name)
		}
	}
}

// The reader must survive any record: decode refuses what it cannot read.
func FuzzDecode(f *testing.F) {
	f.Add(record(opOpen, 0, 2, "/w/a", "", nil))
	f.Add(record(opRename, fReplaces, 32, "/w/a", "/w/b", nil))
	f.Add(record(opOpen, fCounted, 2, "/w/a", "", &seenKey{dent: 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, _, ok := decode(b)
		if ok && ev.Triple.Type == 0 {
			t.Fatalf("decoded an event without a triple: %+v", ev)
		}
	})
}
