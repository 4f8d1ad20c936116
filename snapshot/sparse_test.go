//go:build linux

package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// run is data at an offset of a sparse file.
type run struct {
	off  int64
	data []byte
}

// makeSparse writes runs into a new file of size bytes: everything else
// is a hole.
func makeSparse(t testing.TB, p string, size int64, runs ...run) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	must(t, err)
	defer f.Close()
	for _, r := range runs {
		_, err := f.WriteAt(r.data, r.off)
		must(t, err)
	}
	must(t, f.Truncate(size))
}

// sparseRuns: 64 MiB with data at the start, one run starting and one
// ending off a block boundary, a block of written zeros inside data
// (data, not a hole), and data at the very end.
func sparseRuns() (int64, []run) {
	zeros := append(rnd(5, 4096), make([]byte, 8192)...)
	zeros = append(zeros, rnd(6, 4096)...)
	return 64 << 20, []run{
		{0, rnd(1, 64<<10)},
		{10<<20 + 1000, rnd(2, 100<<10+7)},
		{30 << 20, zeros},
		{64<<20 - 5000, rnd(3, 5000)},
	}
}

// dataMap lists a file's data extents (SEEK_DATA/SEEK_HOLE).
func dataMap(t testing.TB, p string) [][2]int64 {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	var st unix.Stat_t
	must(t, unix.Fstat(fd, &st))
	var out [][2]int64
	for off := int64(0); off < st.Size; {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break
		}
		must(t, err)
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		must(t, err)
		out = append(out, [2]int64{d, h})
		off = h
	}
	return out
}

func blocksOf(t testing.TB, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Stat(p, &st))
	return st.Blocks
}

// sameSparse: b has a's bytes, data map and allocated blocks
// (st_blocks).
func sameSparse(t testing.TB, what, a, b string) {
	t.Helper()
	if !bytes.Equal(readAll(t, a), readAll(t, b)) {
		t.Errorf("%s: %s and %s differ in content", what, a, b)
	}
	if ma, mb := dataMap(t, a), dataMap(t, b); !slices.Equal(ma, mb) {
		t.Errorf("%s: data extents %v, want %v", what, mb, ma)
	}
	// Within one 4 KiB block: ext4 gives a file of more than four
	// extents an extent-tree block, which a file truncated and written
	// again keeps (st_blocks counts it).
	if ba, bb := blocksOf(t, a), blocksOf(t, b); bb < ba-8 || bb > ba+8 {
		t.Errorf("%s: %d blocks, want %d", what, bb, ba)
	}
}

// sparseFixture is a workdir with data/sparse.img (sparseRuns), a dense
// random file and a dense file of written zeros, and a pristine copy of
// the sparse file outside it to compare with.
func sparseFixture(t testing.TB) (W, want string, rs *policy.Ruleset) {
	t.Helper()
	W = t.TempDir()
	size, runs := sparseRuns()
	makeSparse(t, W+"/data/sparse.img", size, runs...)
	want = filepath.Join(t.TempDir(), "want.img")
	makeSparse(t, want, size, runs...)
	if fd, err := unix.Open(want, unix.O_RDONLY, 0); err == nil {
		holes := hasHoles(fd, size)
		unix.Close(fd)
		if !holes {
			testutil.Unavailable(t, "the temp directory's filesystem keeps no holes")
		}
	}
	write(t, W+"/data/dense.bin", rnd(9, 300<<10), 0o644)
	write(t, W+"/data/zeros", make([]byte, 1<<20), 0o644)
	rs = &policy.Ruleset{Workdir: W, Files: []policy.PathRule{rule(W+"/data", policy.MatchSubtree, policy.Mutates, policy.Deletes)}}
	return W, want, rs
}

func recordedEntry(t testing.TB, s *Snapshot, p string) Entry {
	t.Helper()
	for _, e := range s.Manifest().Entries {
		if e.Path == p {
			return e
		}
	}
	t.Fatalf("%s not recorded", p)
	return Entry{}
}

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestSparseRoundTrip: a 64 MiB file with ~180 KiB of data is backed up
// by its data (CopiedBytes, the object's blocks), under a sparse address;
// dense files keep their plain sha256 names; a write into a hole, a
// dense rewrite with the same bytes and a replacement by another inode
// are each restored to the same bytes, data extents and blocks.
func TestSparseRoundTrip(t *testing.T) {
	W, want, rs := sparseFixture(t)
	img := W + "/data/sparse.img"
	s, err := Take(context.Background(), rs, Options{Session: "s"})
	must(t, err)
	e := recordedEntry(t, s, img)
	if !isSparseHash(e.Hash) || !validHash(e.Hash) {
		t.Fatalf("sparse file recorded as %q, want a sparse address", e.Hash)
	}
	for _, p := range []string{"dense.bin", "zeros"} {
		if h := recordedEntry(t, s, W+"/data/"+p).Hash; h != sha256Hex(readAll(t, W+"/data/"+p)) {
			t.Errorf("dense %s recorded as %s, want its sha256", p, h)
		}
	}
	dataBytes := int64(0)
	for _, r := range dataMap(t, want) {
		dataBytes += r[1] - r[0]
	}
	if dense := int64(300<<10 + 1<<20); s.Stats.CopiedBytes > dense+dataBytes+2*sparseBlock {
		t.Errorf("CopiedBytes %d: the holes were read (data %d, dense files %d)", s.Stats.CopiedBytes, dataBytes, dense)
	}
	obj := objectPath(filepath.Dir(s.Dir()), e.Hash)
	sameSparse(t, "object", want, obj)
	if h, _, err := hashPath(img); err != nil || h != e.Hash {
		t.Errorf("hashPath of the file: %s %v, want %s", h, err, e.Hash)
	}

	// A write into a hole, in place.
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("agent was here"), 20<<20)
	must(t, err)
	f.Close()
	// A dense file of zeros stays dense: holes are only where they were.
	must(t, os.WriteFile(W+"/data/zeros", []byte("agent"), 0o644))
	restoreSparse(t, s, img, want, Restored)
	if z := readAll(t, W+"/data/zeros"); !bytes.Equal(z, make([]byte, 1<<20)) || blocksOf(t, W+"/data/zeros") < 2048 {
		t.Errorf("dense zeros restored as %d bytes in %d blocks, want 1 MiB of zeros, all allocated", len(z), blocksOf(t, W+"/data/zeros"))
	}

	// The same bytes, written dense (cp --sparse=never).
	data := readAll(t, img)
	must(t, os.WriteFile(img, data, 0o644))
	if h, _, _ := hashPath(img); h != sha256Hex(data) {
		t.Fatalf("a dense file's name is its sha256: %s", h)
	}
	restoreSparse(t, s, img, want, Restored)

	// Replaced by another inode (rename over it), larger.
	makeSparse(t, W+"/data/new", 100<<20, run{50 << 20, []byte("x")})
	must(t, os.Rename(W+"/data/new", img))
	restoreSparse(t, s, img, want, Restored)

	// Another Take names the restored file as the first did, and the
	// store has it already; GC keeps its object while a session names it.
	s2, err := Take(context.Background(), rs, Options{Session: "s2"})
	must(t, err)
	if s2.Stats.Copied-s2.Stats.Deduped != 0 || recordedEntry(t, s2, img).Hash != e.Hash {
		t.Errorf("second Take: %+v, %s", s2.Stats, recordedEntry(t, s2, img).Hash)
	}
	root := filepath.Dir(s.Dir())
	if _, err := GC(root, 1); err != nil || !fileExists(obj) {
		t.Errorf("GC keeping s2 removed the sparse object (%v)", err)
	}
	if _, err := GC(root, 0); err != nil || fileExists(obj) {
		t.Errorf("GC keeping nothing left the sparse object (%v)", err)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// restoreSparse restores s and checks that img is want again, reported
// as action.
func restoreSparse(t *testing.T, s *Snapshot, img, want string, action Action) {
	t.Helper()
	rep, err := s.Restore(context.Background())
	must(t, err)
	for _, e := range rep.Entries {
		if e.Path == img && e.Action != action {
			t.Errorf("%s: %s, want %s", img, e.Action, action)
		}
	}
	sameSparse(t, "restored", want, img)
}

// TestSparseCorrupt: a sparse object altered in its data, given data in
// a hole, or cut short is refused on restore (ErrCorrupt), and the file
// is not replaced by it; zeros written into one of its holes change no
// byte, and it restores.
func TestSparseCorrupt(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(t *testing.T, fd int, size int64)
	}{
		{"data byte flipped", func(t *testing.T, fd int, size int64) {
			b := make([]byte, 1)
			_, err := unix.Pread(fd, b, 10<<20+2000)
			must(t, err)
			b[0] ^= 1
			_, err = unix.Pwrite(fd, b, 10<<20+2000)
			must(t, err)
		}},
		{"hole filled", func(t *testing.T, fd int, size int64) {
			_, err := unix.Pwrite(fd, []byte{1}, 40<<20)
			must(t, err)
		}},
		{"zeros written into a hole", func(t *testing.T, fd int, size int64) {
			// Same bytes, other layout: the address is of the bytes, so
			// this is no corruption at all.
			_, err := unix.Pwrite(fd, make([]byte, 4096), 40<<20)
			must(t, err)
		}},
		{"truncated", func(t *testing.T, fd int, size int64) { must(t, unix.Ftruncate(fd, size-1)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			W, want, rs := sparseFixture(t)
			img := W + "/data/sparse.img"
			s, err := Take(context.Background(), rs, Options{Session: "s"})
			must(t, err)
			obj := objectPath(filepath.Dir(s.Dir()), recordedEntry(t, s, img).Hash)
			must(t, os.Chmod(obj, 0o600))
			fd, err := unix.Open(obj, unix.O_RDWR, 0)
			must(t, err)
			c.do(t, fd, 64<<20)
			unix.Close(fd)
			// Replaced (a new inode): restored through a temp, which
			// is renamed over the file only once verified.
			write(t, W+"/data/new", []byte("agent's"), 0o644)
			must(t, os.Rename(W+"/data/new", img))
			rep, err := s.Restore(context.Background())
			if strings.HasPrefix(c.name, "zeros") {
				must(t, err)
				if !bytes.Equal(readAll(t, img), readAll(t, want)) {
					t.Error("restored content differs")
				}
				return
			}
			if !errors.Is(err, ErrIncomplete) {
				t.Fatalf("Restore from a corrupt object: %v, want ErrIncomplete", err)
			}
			var failed string
			for _, e := range rep.Entries {
				if e.Error != "" {
					failed += e.Path + ": " + e.Error + "\n"
				}
			}
			if !strings.Contains(failed, img+": ") || !strings.Contains(failed, "hashes to") && !strings.Contains(failed, "changed") {
				t.Errorf("failed entries:\n%s\nwant %s refused as corrupt", failed, img)
			}
			if got, err := os.ReadFile(img); err != nil || string(got) != "agent's" {
				t.Errorf("the file was replaced by a corrupt copy (%d bytes, %v)", len(got), err)
			}
		})
	}
}

// TestSparseChanging: a file with holes that changes while it is
// copied is copied again, and one that never holds still refuses the
// backup (ErrChanged), as a dense one does.
func TestSparseChanging(t *testing.T) {
	dir := t.TempDir()
	src := dir + "/src.img"
	size, runs := sparseRuns()
	makeSparse(t, src, size, runs...)
	writes := 0
	afterRead := func() {
		writes++
		f, err := os.OpenFile(src, os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt([]byte{byte(writes)}, 20<<20)
		must(t, err)
		f.Close()
	}
	var st unix.Stat_t
	must(t, unix.Stat(dir, &st))
	sparseReadHook = afterRead
	defer func() { sparseReadHook = nil }()
	_, err := copyIn(src, dir+"/obj", st.Dev, dir)
	if !errors.Is(err, ErrChanged) || writes < 4 {
		t.Fatalf("copy of a file written during every read: %v after %d writes, want ErrChanged after 4 tries", err, writes)
	}
	writes = 0
	sparseReadHook = func() {
		if writes == 0 {
			afterRead()
		}
	}
	res, err := copyIn(src, dir+"/obj", st.Dev, dir)
	must(t, err)
	if h, _, err := hashPath(src); err != nil || h != res.hash || !isSparseHash(h) {
		t.Errorf("copied as %s, the file now hashes to %s (%v)", res.hash, h, err)
	}
	sameSparse(t, "copy", src, dir+"/obj")
}

// TestSparseSmallBlocks: on xfs of 1 KiB blocks, a file whose only hole
// is smaller than 4 KiB is named and copied as a dense one, one with a
// larger hole too as a sparse one. Backed up on the same filesystem
// (clones) or on another (copies, by whole 4 KiB blocks), each comes
// back byte-identical and, restored again, is unchanged: its copy is
// named as its source was.
func TestSparseSmallBlocks(t *testing.T) {
	W := mountImage(t, "xfs", "-b", "size=1024")
	for _, c := range []struct {
		name string
		dir  string
		want [][2]int64 // the restored big file's data extents
	}{
		{"cloned", "", [][2]int64{{0, 1024}, {3072, 4096}, {40 << 10, 41 << 10}}},
		{"copied", t.TempDir(), [][2]int64{{0, 4096}, {40 << 10, 44 << 10}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			small, big := W+"/"+c.name+"/small", W+"/"+c.name+"/big"
			makeSparse(t, small, 8192, run{0, rnd(1, 1024)}, run{2048, rnd(2, 6144)})
			makeSparse(t, big, 64<<10, run{0, rnd(3, 1024)}, run{3072, rnd(4, 1024)}, run{40 << 10, rnd(5, 100)})
			wantSmall, wantBig := readAll(t, small), readAll(t, big)
			rs := &policy.Ruleset{Workdir: W, Files: []policy.PathRule{rule(W+"/"+c.name, policy.MatchSubtree, policy.Mutates)}}
			s, err := Take(context.Background(), rs, Options{Session: "s", Dir: c.dir})
			must(t, err)
			if h := recordedEntry(t, s, small).Hash; h != sha256Hex(wantSmall) {
				t.Errorf("file with a 1 KiB hole named %s, want its sha256", h)
			}
			if h := recordedEntry(t, s, big).Hash; !isSparseHash(h) {
				t.Errorf("file with a 36 KiB hole named %s, want a sparse address", h)
			}
			write(t, small, []byte("agent"), 0o644)
			write(t, big, []byte("agent"), 0o644)
			rep, err := s.Restore(context.Background())
			must(t, err)
			if rep.Count(Restored) != 2 || !bytes.Equal(readAll(t, small), wantSmall) || !bytes.Equal(readAll(t, big), wantBig) {
				t.Fatalf("restore: %+v", rep.Changed())
			}
			if m := dataMap(t, big); !slices.Equal(m, c.want) {
				t.Errorf("restored file's data extents %v, want %v", m, c.want)
			}
			rep, err = s.Restore(context.Background())
			must(t, err)
			if ch := rep.Changed(); len(ch) != 0 {
				t.Errorf("second restore changed %+v, want nothing", ch)
			}
		})
	}
}
