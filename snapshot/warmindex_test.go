//go:build linux

package snapshot

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func indexIno(t *testing.T, root string) uint64 {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(root, indexFile), &st))
	return st.Ino
}

// TestWarmIndexSeesAChange: the index a process keeps between Takes is
// not written again while nothing changed, and a file changed between
// two Takes (same size, same mtime: only its ctime tells) is read and
// backed up again, so the rollback of the later session restores the
// newer content, not the one the warm index first saw.
func TestWarmIndexSeesAChange(t *testing.T) {
	f := newFixture(t)
	time.Sleep(2 * racyWindow * time.Nanosecond) // older than the racy window
	s1 := f.take(t, "s1")
	root := filepath.Dir(s1.Dir())
	ino := indexIno(t, root)
	s2 := f.take(t, "s2")
	if s2.Stats.Hashed != 0 || s2.Stats.IndexHits != s1.Stats.Files {
		t.Fatalf("warm Take of an unchanged tree: %+v, want only index hits", s2.Stats)
	}
	if indexIno(t, root) != ino {
		t.Error("the index was written again though nothing in it changed")
	}
	// A change the index's (size, mtime) cannot see: same length, the
	// old mtime put back.
	a := f.W + "/src/a.txt"
	var st unix.Stat_t
	must(t, unix.Stat(a, &st))
	newer := []byte("ALPHA\n")
	must(t, os.WriteFile(a, newer, 0o644))
	must(t, unix.UtimesNano(a, []unix.Timespec{st.Atim, st.Mtim}))
	time.Sleep(2 * racyWindow * time.Nanosecond)
	s3 := f.take(t, "s3")
	if s3.Stats.Hashed == 0 || s3.Stats.IndexHits != s1.Stats.Files-1 {
		t.Fatalf("Take after a change that keeps size and mtime: %+v, want the file read again", s3.Stats)
	}
	if indexIno(t, root) == ino {
		t.Error("the index was not written again after a file changed")
	}
	// The agent of the third session writes it; the rollback puts back
	// what it was when that session started.
	must(t, os.WriteFile(a, []byte("agent!\n"), 0o644))
	if _, err := s3.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(a); !bytes.Equal(got, newer) {
		t.Fatalf("after rollback %s holds %q, want the newer %q", a, got, newer)
	}
}

// TestTakeNotReady: a Take whose Ready says no leaves nothing behind.
func TestTakeNotReady(t *testing.T) {
	f := newFixture(t)
	no := errors.New("refused")
	_, err := Take(context.Background(), f.rs, Options{Session: "s", Scopes: DeclaredScopes(f.rs), Ready: func() error { return no }})
	if !errors.Is(err, no) {
		t.Fatalf("Take: %v, want %v", err, no)
	}
	root := filepath.Join(f.W, ".klock", "backups")
	if l, _ := List(root); len(l) != 0 {
		t.Errorf("List after a refused Take: %+v", l)
	}
	left, _ := os.ReadDir(root)
	for _, e := range left {
		if e.Name() != objectsDir {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	if objs := countObjects(t, root); objs != 0 {
		t.Errorf("%d objects left behind", objs)
	}
	s := f.take(t, "s") // and the session id is free
	if s.Stats.Files == 0 {
		t.Errorf("Take after: %+v", s.Stats)
	}
}

// TestTakeStagedBeforeReady: with nothing new to store (every file's
// content already in the store), the backup is written, flushed and
// committed before Ready is asked, so a session's walls come up
// meanwhile and its agent waits for no fsync after them; refused, it
// still leaves nothing behind, and accepted, it is the backup.
func TestTakeStagedBeforeReady(t *testing.T) {
	f := newFixture(t)
	time.Sleep(2 * racyWindow * time.Nanosecond) // older than the racy window
	f.take(t, "first")                           // the store and the index hold every file now
	root := filepath.Join(f.W, ".klock", "backups")
	staged := func(session string) bool {
		_, err := Open(root, session)
		return err == nil
	}
	no := errors.New("refused")
	var sawStaged bool
	_, err := Take(context.Background(), f.rs, Options{Session: "s", Scopes: DeclaredScopes(f.rs), Ready: func() error {
		sawStaged = staged("s")
		return no
	}})
	if !errors.Is(err, no) {
		t.Fatalf("Take: %v, want %v", err, no)
	}
	if !sawStaged {
		t.Errorf("Ready was asked before the backup was committed")
	}
	if l, _ := List(root); len(l) != 1 || l[0].Session != "first" {
		t.Errorf("List after a refused Take: %+v, want only the first", l)
	}
	left, _ := os.ReadDir(root)
	for _, e := range left {
		if strings.HasPrefix(e.Name(), ".tmp-") || e.Name() == "s" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	s, err := Take(context.Background(), f.rs, Options{Session: "s", Scopes: DeclaredScopes(f.rs), Ready: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if s.Stats.Copied != 0 || s.Stats.Files == 0 {
		t.Errorf("Take after: %+v, want every file recorded, none copied", s.Stats)
	}
	if _, err := Open(root, "s"); err != nil {
		t.Errorf("the accepted backup does not open: %v", err)
	}
}
