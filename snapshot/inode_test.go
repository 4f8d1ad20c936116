//go:build linux

package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inoOf is p's inode number (0: missing).
func inoOf(t testing.TB, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return 0
	}
	return st.Ino
}

// writeThrough rewrites the file at p in place (the same inode).
func writeThrough(t testing.TB, p string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	_, err = f.Write(data)
	must(t, err)
	must(t, f.Close())
}

func reportOf(rep Report, p string) (ReportEntry, bool) {
	for _, e := range rep.Entries {
		if e.Path == p {
			return e, true
		}
	}
	return ReportEntry{}, false
}

func wantFile(t testing.TB, p, content string, mode uint32, ino uint64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	if got, _ := os.ReadFile(p); string(got) != content {
		t.Errorf("%s = %q, want %q", p, got, content)
	}
	if st.Mode&07777 != mode {
		t.Errorf("%s: mode %o, want %o", p, st.Mode&07777, mode)
	}
	if ino != 0 && st.Ino != ino {
		t.Errorf("%s: inode %d, want %d (the file that was there before the session)", p, st.Ino, ino)
	}
}

func wantGone(t testing.TB, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("%s still exists (%v)", p, err)
	}
}

// twoSessions is a workdir W whose a/ another session (A) holds and whose
// b/ is this session's (B), backed up over the whole of W.
type twoSessions struct {
	W, root string
	regA    Region
}

const whyA = "session A holds MUTATES FILE:a/**"

func newTwoSessions(t *testing.T) *twoSessions {
	base := t.TempDir()
	W := filepath.Join(base, "w")
	write(t, W+"/a/file", []byte("A's work\n"), 0o640)
	write(t, W+"/a/keep", []byte("A's other\n"), 0o644)
	write(t, W+"/b/own", []byte("B's file\n"), 0o600)
	write(t, W+"/b/d/x", []byte("x\n"), 0o644)
	write(t, W+"/b/d/y/z", []byte("z\n"), 0o444)
	return &twoSessions{W: W, root: filepath.Join(base, "backups"), regA: region(t, W+"/a/**", whyA)}
}

func (f *twoSessions) take(t *testing.T, others bool) *Snapshot {
	t.Helper()
	o := Options{Dir: f.root, Session: "b", Scopes: []Scope{{Path: f.W, Tree: true}}}
	if others {
		o.Others = []string{f.W + "/a"}
	}
	s, err := Take(context.Background(), nil, o)
	must(t, err)
	return s
}

// TestMoveBackRenamed: a recorded file renamed to a new name in the scope,
// its mode and content changed through that name, comes back to its name
// as the same inode, with its content and mode; the new name is gone.
func TestMoveBackRenamed(t *testing.T) {
	f := newTwoSessions(t)
	W := f.W
	s := f.take(t, false)
	ino := inoOf(t, W+"/b/own")
	must(t, os.Rename(W+"/b/own", W+"/b/renamed"))
	must(t, os.Chmod(W+"/b/renamed", 0o666))
	writeThrough(t, W+"/b/renamed", []byte("the agent's\n"))
	rep, err := s.Restore(context.Background())
	if err != nil {
		t.Fatalf("Restore: %v\n%v", err, rep.Failed())
	}
	wantFile(t, W+"/b/own", "B's file\n", 0o600, ino)
	wantGone(t, W+"/b/renamed")
	if e, _ := reportOf(rep, W+"/b/own"); e.Action != MovedBack || !strings.Contains(e.Why, W+"/b/renamed") {
		t.Errorf("report for b/own: %+v, want moved back naming b/renamed", e)
	}
}

// TestMoveBackFromLeftRegion: the attack. Session B renames A's file into
// its own tree; its rollback, which leaves A's region, moves the file
// back (the same inode) instead of removing it as B's new file. Without
// Reclaim what B wrote through it stays (A's region is left); with it,
// the content goes back too, and the report names A.
func TestMoveBackFromLeftRegion(t *testing.T) {
	for _, others := range []bool{false, true} {
		for _, reclaim := range []bool{false, true} {
			t.Run(map[bool]string{false: "leave", true: "others"}[others]+map[bool]string{false: "", true: "+reclaim"}[reclaim], func(t *testing.T) {
				f := newTwoSessions(t)
				W := f.W
				s := f.take(t, others)
				ino := inoOf(t, W+"/a/file")
				must(t, os.Rename(W+"/a/file", W+"/b/stolen"))
				writeThrough(t, W+"/b/stolen", []byte("B's edit\n"))
				opts := []RestoreOption{SpareOthersNew(), Leave(f.regA)}
				if reclaim {
					opts = append(opts, Reclaim(W+"/a/file"))
				}
				rep, err := s.Restore(context.Background(), opts...)
				if err != nil {
					t.Fatalf("Restore: %v\n%v", err, rep.Failed())
				}
				wantGone(t, W+"/b/stolen")
				content := "B's edit\n"
				if reclaim {
					content = "A's work\n"
				}
				wantFile(t, W+"/a/file", content, 0o640, ino)
				e, _ := reportOf(rep, W+"/a/file")
				if e.Action != MovedBack || e.Holder != whyA || !strings.Contains(e.Why, W+"/b/stolen") {
					t.Errorf("report for a/file: %+v", e)
				}
				if reclaim && !strings.Contains(e.Why, reclaimWhy) {
					t.Errorf("reclaimed a/file's report does not say so: %+v", e)
				}
			})
		}
	}
}

// TestExcludedStolenKept: a backup that never held A's tree (it was
// Exclude) does not know A's file; renamed into B's tree it is still not
// removed (born before Take, one link), but kept and reported.
func TestExcludedStolenKept(t *testing.T) {
	f := newTwoSessions(t)
	W := f.W
	s, err := Take(context.Background(), nil, Options{Dir: f.root, Session: "b", Scopes: []Scope{{Path: W, Tree: true}}, Exclude: []string{W + "/a"}})
	must(t, err)
	ino := inoOf(t, W+"/a/file")
	must(t, os.Rename(W+"/a/file", W+"/b/stolen"))
	rep, err := s.Restore(context.Background(), Leave(f.regA))
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Restore: %v", err)
	}
	wantFile(t, W+"/b/stolen", "A's work\n", 0o640, ino)
	if e, _ := reportOf(rep, W+"/b/stolen"); e.Error == "" || !strings.Contains(e.Why, "existed before the session") {
		t.Errorf("report: %+v", e)
	}
}

// TestHardLinkWriteThrough: a hard link made to a recorded file and
// written through: the extra name goes, the inode stays at its name with
// its content back.
func TestHardLinkWriteThrough(t *testing.T) {
	f := newTwoSessions(t)
	W := f.W
	s := f.take(t, false)
	ino := inoOf(t, W+"/b/own")
	must(t, os.Link(W+"/b/own", W+"/b/link"))
	writeThrough(t, W+"/b/link", []byte("through the link\n"))
	rep, err := s.Restore(context.Background())
	if err != nil {
		t.Fatalf("Restore: %v\n%v", err, rep.Failed())
	}
	wantGone(t, W+"/b/link")
	wantFile(t, W+"/b/own", "B's file\n", 0o600, ino)
	var st unix.Stat_t
	must(t, unix.Lstat(W+"/b/own", &st))
	if st.Nlink != 1 {
		t.Errorf("b/own has %d links", st.Nlink)
	}
}

// TestMoveBackDirectory: a renamed directory comes back with its subtree
// (the same inodes); what the agent made in it goes.
func TestMoveBackDirectory(t *testing.T) {
	f := newTwoSessions(t)
	W := f.W
	s := f.take(t, false)
	inoD, inoZ := inoOf(t, W+"/b/d"), inoOf(t, W+"/b/d/y/z")
	must(t, os.Rename(W+"/b/d", W+"/b/e"))
	write(t, W+"/b/e/new", []byte("agent's\n"), 0o644)
	must(t, os.Rename(W+"/b/e/x", W+"/b/e/y/x2"))
	rep, err := s.Restore(context.Background())
	if err != nil {
		t.Fatalf("Restore: %v\n%v", err, rep.Failed())
	}
	wantGone(t, W+"/b/e")
	wantGone(t, W+"/b/d/new")
	wantGone(t, W+"/b/d/y/x2")
	if got := inoOf(t, W+"/b/d"); got != inoD {
		t.Errorf("b/d is inode %d, want %d", got, inoD)
	}
	wantFile(t, W+"/b/d/x", "x\n", 0o644, 0)
	wantFile(t, W+"/b/d/y/z", "z\n", 0o444, inoZ)
}

// TestKeepsPreSessionUnrecorded: a file made before Take outside the
// recorded scopes and renamed into one is not removed (born before Take,
// one link): it stays, reported failed. A hard link's extra name (the
// inode lives on by its old name) and a file made after Take go.
func TestKeepsPreSessionUnrecorded(t *testing.T) {
	base := t.TempDir()
	W := filepath.Join(base, "w")
	write(t, W+"/scope/f", []byte("f\n"), 0o644)
	write(t, W+"/out/old", []byte("old\n"), 0o644)
	write(t, W+"/out/linked", []byte("linked\n"), 0o644)
	s, err := Take(context.Background(), nil, Options{Dir: filepath.Join(base, "backups"), Session: "s", Scopes: []Scope{{Path: W + "/scope", Tree: true}}})
	must(t, err)
	if s.Manifest().Started.IsZero() || s.Info().Started.IsZero() {
		t.Fatal("Take start not recorded")
	}
	ino := inoOf(t, W+"/out/old")
	must(t, os.Rename(W+"/out/old", W+"/scope/old"))
	must(t, os.Link(W+"/out/linked", W+"/scope/linked"))
	write(t, W+"/scope/new", []byte("new\n"), 0o644)
	must(t, os.Mkdir(W+"/scope/newdir", 0o755))
	write(t, W+"/scope/newdir/n", []byte("n\n"), 0o644)
	rep, err := s.Restore(context.Background())
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Restore: %v, want ErrIncomplete (the kept file is a failure)", err)
	}
	var st unix.Stat_t
	if unix.Statx(unix.AT_FDCWD, W+"/scope/old", 0, unix.STATX_BTIME, &unix.Statx_t{}) != nil || unix.Lstat(W+"/scope/old", &st) != nil || st.Ino != ino {
		t.Fatalf("scope/old was removed (or replaced): %v", rep.Entries)
	}
	failed := rep.Failed()
	if len(failed) != 1 || failed[0].Path != W+"/scope/old" || !strings.Contains(failed[0].Why, "existed before the session") ||
		!strings.Contains(failed[0].Why, "inode "+itoa(ino)) || !strings.Contains(failed[0].Why, "old name is unknown") {
		t.Errorf("failed: %+v", failed)
	}
	wantGone(t, W+"/scope/linked")
	wantGone(t, W+"/scope/new")
	wantGone(t, W+"/scope/newdir")
	wantFile(t, W+"/out/linked", "linked\n", 0o644, 0)
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// TestOthersNeverFailTake: a file in another session's tree rewritten
// without pause while the backup is taken, another replaced over and
// over, and one removed and made again, never fail Take; what held still
// is recorded with content, and all of it as Other.
func TestOthersNeverFailTake(t *testing.T) {
	f := newTwoSessions(t)
	W := f.W
	write(t, W+"/a/hot", rnd(3, 1<<20), 0o644)
	write(t, W+"/a/swapped", rnd(4, 256<<10), 0o644)
	write(t, W+"/a/flicker", []byte("on\n"), 0o644)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fd, err := os.OpenFile(W+"/a/hot", os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer fd.Close()
		buf := rnd(5, 64<<10)
		for i := 0; !stop.Load(); i++ {
			fd.WriteAt(buf, int64(i%16)*int64(len(buf)))
			buf[0]++
			if i%8 == 0 {
				os.WriteFile(W+"/a/swapped.tmp", buf, 0o644)
				os.Rename(W+"/a/swapped.tmp", W+"/a/swapped")
				os.Remove(W + "/a/flicker")
			} else if i%8 == 4 {
				os.WriteFile(W+"/a/flicker", buf[:10], 0o644)
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	time.Sleep(5 * time.Millisecond)
	bare := 0
	for k := 0; k < 8; k++ {
		s, err := Take(context.Background(), nil, Options{Dir: f.root, Session: "t" + itoa(uint64(k)), Scopes: []Scope{{Path: W, Tree: true}}, Others: []string{W + "/a"}})
		if err != nil {
			t.Fatalf("Take %d: %v", k, err)
		}
		for _, e := range s.Manifest().Entries {
			in := strings.HasPrefix(e.Path, W+"/a/") || e.Path == W+"/a"
			if e.Other != in {
				t.Errorf("%s: Other = %v", e.Path, e.Other)
			}
			if e.Path == W+"/a/keep" && e.Hash == "" {
				t.Errorf("a/keep (holding still) recorded without content")
			}
			if e.Path == W+"/a/hot" && e.Hash == "" {
				bare++
			}
		}
		if m := s.Manifest(); len(m.Others) != 1 || m.Others[0] != W+"/a" {
			t.Errorf("manifest Others = %v", m.Others)
		}
	}
	t.Logf("a/hot recorded without content in %d of 8 backups", bare)
}

// TestReclaim: another session's file the agent wrote to is left as it
// is without Reclaim (reported left, with its holder), and put back with
// it. A reclaimed file the backup holds no content of is a failure that
// says so.
func TestReclaim(t *testing.T) {
	f := newTwoSessions(t)
	W := f.W
	s := f.take(t, true)
	ino := inoOf(t, W+"/a/file")
	writeThrough(t, W+"/a/file", []byte("B wrote here\n"))
	must(t, os.Chmod(W+"/a/file", 0o600))

	rep, err := s.Restore(context.Background(), Leave(f.regA))
	must(t, err)
	wantFile(t, W+"/a/file", "B wrote here\n", 0o600, ino)
	if e, _ := reportOf(rep, W+"/a/file"); e.Action != Left || e.Why != whyA {
		t.Errorf("without Reclaim: %+v", e)
	}
	// Others alone (no Leave) leaves it too.
	rep, err = s.Restore(context.Background())
	must(t, err)
	wantFile(t, W+"/a/file", "B wrote here\n", 0o600, ino)
	if e, _ := reportOf(rep, W+"/a/file"); e.Action != Left || e.Why != othersWhy {
		t.Errorf("Others without Leave: %+v", e)
	}

	rep, err = s.Restore(context.Background(), Only(Scope{Path: W + "/b", Tree: true}), Leave(f.regA), Reclaim(W+"/a/file"))
	if err != nil {
		t.Fatalf("Restore: %v\n%v", err, rep.Failed())
	}
	wantFile(t, W+"/a/file", "A's work\n", 0o640, ino)
	if e, _ := reportOf(rep, W+"/a/file"); e.Action != Restored || e.Holder != whyA || !strings.Contains(e.Why, reclaimWhy) {
		t.Errorf("reclaimed: %+v", e)
	}
	wantFile(t, W+"/a/keep", "A's other\n", 0o644, 0)

	// Without content in the backup.
	p := filepath.Join(s.Dir(), manifestFile)
	var m Manifest
	data, err := os.ReadFile(p)
	must(t, err)
	must(t, json.Unmarshal(data, &m))
	for i := range m.Entries {
		if m.Entries[i].Path == W+"/a/file" {
			m.Entries[i].Hash = ""
		}
	}
	data, _ = json.Marshal(&m)
	must(t, os.WriteFile(p, data, 0o600))
	o, err := Open(f.root, "b")
	must(t, err)
	writeThrough(t, W+"/a/file", []byte("B again\n"))
	must(t, os.Chmod(W+"/a/file", 0o600))
	rep, err = o.Restore(context.Background(), Leave(f.regA), Reclaim(W+"/a/file"))
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Restore: %v, want ErrIncomplete", err)
	}
	e, _ := reportOf(rep, W+"/a/file")
	if e.Error == "" || !strings.Contains(e.Error, "content was not recorded") || !strings.Contains(e.Error, "metadata was put back") || e.Holder != whyA {
		t.Errorf("bare reclaimed: %+v", e)
	}
	wantFile(t, W+"/a/file", "B again\n", 0o640, ino)
}

// TestReclaimName: another holder's file whose name alone the agent moved
// into its own scope comes back to its name as the same inode, with what
// the holder wrote into it since the backup (its work, not the agent's);
// gone by the time of the restore (its inode cannot come back), it is
// reclaimed whole, as Reclaim does.
func TestReclaimName(t *testing.T) {
	f := newTwoSessions(t)
	W := f.W
	s := f.take(t, true)
	ino := inoOf(t, W+"/a/file")
	writeThrough(t, W+"/a/file", []byte("A's later work\n")) // the holder, after the backup
	must(t, os.Chmod(W+"/a/file", 0o600))
	must(t, os.Rename(W+"/a/file", W+"/b/stolen")) // the agent
	rep, err := s.Restore(context.Background(), Only(Scope{Path: W + "/b", Tree: true}), Leave(f.regA), ReclaimName(W+"/a/file"))
	if err != nil {
		t.Fatalf("Restore: %v\n%v", err, rep.Failed())
	}
	wantFile(t, W+"/a/file", "A's later work\n", 0o600, ino)
	if _, err := os.Lstat(W + "/b/stolen"); !os.IsNotExist(err) {
		t.Errorf("b/stolen is left: %v", err)
	}
	if e, _ := reportOf(rep, W+"/a/file"); e.Action != MovedBack || e.Holder != whyA {
		t.Errorf("reclaimed by name: %+v", e)
	}

	must(t, os.Rename(W+"/a/file", W+"/b/stolen"))
	must(t, os.Remove(W+"/b/stolen"))
	rep, err = s.Restore(context.Background(), Only(Scope{Path: W + "/b", Tree: true}), Leave(f.regA), ReclaimName(W+"/a/file"))
	if err != nil {
		t.Fatalf("Restore: %v\n%v", err, rep.Failed())
	}
	wantFile(t, W+"/a/file", "A's work\n", 0o640, 0)
}
