//go:build linux

package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// Add backs up paths the pre-flight backup did not cover, as they are
// when it is called; a Restore (of this Snapshot, or of the one Open reads
// from disk later: klock rollback) puts them back, and removes what was
// made at an added path that did not exist.
func TestAddRecordsMoreWhileTheSessionRuns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	work, outside, root := filepath.Join(dir, "work"), filepath.Join(dir, "etc"), filepath.Join(dir, "backups")
	write(t, filepath.Join(work, "a"), []byte("a0"), 0o644)
	write(t, filepath.Join(outside, "hosts"), []byte("127.0.0.1 localhost\n"), 0o644)
	write(t, filepath.Join(outside, "tree", "x"), []byte("x0"), 0o600)
	s, err := Take(ctx, nil, Options{Dir: root, Session: "s-1", Scopes: []Scope{{Path: work, Tree: true}}})
	must(t, err)
	hosts, made, tree := filepath.Join(outside, "hosts"), filepath.Join(outside, "new"), filepath.Join(outside, "tree")
	if known, _ := s.Existed(hosts); known {
		t.Fatal("outside the backup before Add")
	}

	// Covered already: nothing to add.
	if got, err := s.Add(ctx, Scope{Path: filepath.Join(work, "a")}); err != nil || got != nil {
		t.Fatalf("covered path added: %v %v", got, err)
	}
	got, err := s.Add(ctx, Scope{Path: hosts}, Scope{Path: made}, Scope{Path: tree, Tree: true})
	must(t, err)
	if want := []Scope{{Path: hosts}, {Path: made}, {Path: tree, Tree: true}}; !slices.Equal(got, want) {
		t.Fatalf("added %v, want %v", got, want)
	}
	if known, existed := s.Existed(hosts); !known || !existed {
		t.Fatalf("hosts after Add: known %v existed %v", known, existed)
	}
	if known, existed := s.Existed(made); !known || existed {
		t.Fatalf("a path that did not exist: known %v existed %v", known, existed)
	}
	if ents, _ := os.ReadDir(root); slices.ContainsFunc(ents, func(e os.DirEntry) bool {
		return e.Name() != "s-1" && e.Name()[0] != '.' && e.Name() != "objects" && e.Name() != "index"
	}) {
		t.Fatalf("the part was left behind: %v", ents)
	}

	// The agent changes them; klock rollback opens the backup from disk.
	write(t, hosts, []byte("6.6.6.6 bank\n"), 0o644)
	write(t, made, []byte("planted"), 0o644)
	must(t, os.Remove(filepath.Join(tree, "x")))
	write(t, filepath.Join(work, "a"), []byte("a1"), 0o644)
	opened, err := Open(root, "s-1")
	must(t, err)
	if _, err := opened.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{hosts: "127.0.0.1 localhost\n", filepath.Join(tree, "x"): "x0", filepath.Join(work, "a"): "a0"} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s after restore: %q %v, want %q", p, b, err, want)
		}
	}
	if _, err := os.Lstat(made); !os.IsNotExist(err) {
		t.Errorf("the file made at an added path that did not exist is still there: %v", err)
	}
	// A restore has begun: Add refuses (the restore's plan would not match).
	if _, err := opened.Add(ctx, Scope{Path: filepath.Join(dir, "later")}); err == nil {
		t.Fatal("Add after a restore accepted")
	}
}

// Existed (the session's event loop) and Add (an amendment) run at once.
func TestAddConcurrentWithReaders(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "w", "a"), []byte("a"), 0o644)
	s, err := Take(ctx, nil, Options{Dir: filepath.Join(dir, "b"), Session: "s-1", Scopes: []Scope{{Path: filepath.Join(dir, "w"), Tree: true}}})
	must(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				s.Existed(filepath.Join(dir, "w", "a"))
				_ = s.Manifest().Scopes
			}
		}
	}()
	for i := range 5 {
		p := filepath.Join(dir, "o", string(rune('a'+i)))
		write(t, p, []byte("x"), 0o644)
		if _, err := s.Add(ctx, Scope{Path: p}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if n := len(s.Manifest().Scopes); n != 6 {
		t.Fatalf("%d scopes, want 6", n)
	}
}
