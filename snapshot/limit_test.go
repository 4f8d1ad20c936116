//go:build linux

package snapshot

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestRestoreOnly: with Only, Restore puts back what is at or below its
// roots (a renamed directory's subtree included) and leaves everything
// else in the scopes as it finds it, new files included; directories
// above a root get their times back and nothing else.
func TestRestoreOnly(t *testing.T) {
	f := newFixture(t)
	W := f.W
	s := f.take(t, "only")
	var srcTimes unix.Stat_t
	must(t, unix.Lstat(W+"/src", &srcTimes))

	// The "agent": edits a.txt, renames sub/ away, creates mine.txt.
	write(t, W+"/src/a.txt", []byte("agent edit\n"), 0o644)
	must(t, os.Rename(W+"/src/sub", W+"/src/sub-moved"))
	write(t, W+"/src/mine.txt", []byte("agent\n"), 0o644)
	// Someone else, in the same scope: edits b.txt, creates theirs.txt,
	// and a directory of their own.
	write(t, W+"/src/b.txt", []byte("their edit\n"), 0o640)
	write(t, W+"/src/theirs.txt", []byte("theirs\n"), 0o644)
	write(t, W+"/src/theirdir/x", []byte("x\n"), 0o644)
	must(t, os.Chmod(W+"/src", 0o700)) // not a time: stays

	rep, err := s.Restore(context.Background(), Only(Scope{W + "/src/a.txt", false}, Scope{W + "/src/sub", true}, Scope{W + "/src/sub-moved/", true}, Scope{W + "/src/mine.txt", false}))
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	for p, want := range map[string]string{
		"/src/a.txt":          "alpha\n",
		"/src/sub/c.txt":      "charlie\n",
		"/src/sub/deep/d.txt": "delta\n",
		"/src/b.txt":          "their edit\n",
		"/src/theirs.txt":     "theirs\n",
		"/src/theirdir/x":     "x\n",
	} {
		if got, err := os.ReadFile(W + p); err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"/src/mine.txt", "/src/sub-moved"} {
		if _, err := os.Lstat(W + p); !os.IsNotExist(err) {
			t.Errorf("%s still exists (%v): the agent made it", p, err)
		}
	}
	var st unix.Stat_t
	must(t, unix.Lstat(W+"/src", &st))
	if st.Mode&0o7777 != 0o700 {
		t.Errorf("src mode %o: a directory above the roots got more than its times back", st.Mode&0o7777)
	}
	if st.Mtim != srcTimes.Mtim {
		t.Errorf("src mtime %v, want %v back", st.Mtim, srcTimes.Mtim)
	}
	for _, e := range rep.Entries {
		switch e.Path {
		case W + "/src/b.txt", W + "/src/theirs.txt", W + "/src/theirdir", W + "/src/theirdir/x":
			t.Errorf("report lists %s (%s), outside the roots", e.Path, e.Action)
		}
	}

	// A hard-link group is restored whole: hl1, hl2 and sub/hl3 share an
	// inode; the agent wrote through hl2, and only hl2 is a root.
	f2, err := os.OpenFile(W+"/src/hl2", os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f2.WriteString("through hl2\n")
	must(t, err)
	must(t, f2.Close())
	if _, err := s.Restore(context.Background(), Only(Scope{Path: W + "/src/hl2"})); err != nil {
		t.Fatal(err)
	}
	var a, b, c unix.Stat_t
	must(t, unix.Lstat(W+"/src/hl1", &a))
	must(t, unix.Lstat(W+"/src/hl2", &b))
	must(t, unix.Lstat(W+"/src/sub/hl3", &c))
	for _, p := range []string{"/src/hl1", "/src/hl2", "/src/sub/hl3"} {
		if got, _ := os.ReadFile(W + p); string(got) != "hard link group\n" {
			t.Errorf("%s = %q after restoring its group through hl2", p, got)
		}
	}
	if a.Ino != b.Ino || a.Ino != c.Ino {
		t.Errorf("the group is split: inodes %d %d %d", a.Ino, b.Ino, c.Ino)
	}

	// An exact root on a directory (the agent listed it) is the directory
	// alone: what others made in it stays.
	write(t, W+"/src/later.txt", []byte("later\n"), 0o644)
	if _, err := s.Restore(context.Background(), Only(Scope{W + "/src", false})); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(W + "/src/later.txt"); err != nil || string(got) != "later\n" {
		t.Errorf("an exact root on src removed later.txt: %q %v", got, err)
	}
	must(t, unix.Lstat(W+"/src", &st))
	if st.Mode&0o7777 == 0o700 {
		t.Errorf("an exact root on src did not restore its mode")
	}

	// Only() with no roots restores nothing; no option restores all.
	write(t, W+"/src/a.txt", []byte("again\n"), 0o644)
	if _, err := s.Restore(context.Background(), Only()); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(W + "/src/a.txt"); string(got) != "again\n" {
		t.Errorf("Only() restored a.txt: %q", got)
	}
	if _, err := s.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/src/theirs.txt", "/src/theirdir"} {
		if _, err := os.Lstat(W + p); !os.IsNotExist(err) {
			t.Errorf("a full restore kept %s (%v)", p, err)
		}
	}
}

// TestRestoreOnlyResumed: a limited restore interrupted after it journaled
// its start, then finished by a restore without a limit of its own (klock
// rollback after a crash), keeps the interrupted run's limit.
func TestRestoreOnlyResumed(t *testing.T) {
	f := newFixture(t)
	W := f.W
	s := f.take(t, "resumed")
	write(t, W+"/src/mine.txt", []byte("agent\n"), 0o644)
	write(t, W+"/src/theirs.txt", []byte("theirs\n"), 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	testHook = func(op, p string) { cancel() } // at the journal's first flush
	_, err := s.Restore(ctx, Only(Scope{Path: W + "/src/mine.txt"}))
	testHook = nil
	if err == nil {
		t.Fatal("the interrupted restore finished")
	}
	// Interrupted again, resuming with a limit of its own: the limit holds.
	ctx, cancel = context.WithCancel(context.Background())
	testHook = func(op, p string) { cancel() }
	_, err = s.Restore(ctx, Only(Scope{Path: W + "/src/mine.txt"}))
	testHook = nil
	if err == nil {
		t.Fatal("the second interrupted restore finished")
	}
	rep, err := s.Restore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Resumed {
		t.Fatal("the second restore did not resume the first")
	}
	if _, err := os.Lstat(W + "/src/mine.txt"); !os.IsNotExist(err) {
		t.Errorf("mine.txt kept (%v)", err)
	}
	if got, err := os.ReadFile(W + "/src/theirs.txt"); err != nil || string(got) != "theirs\n" {
		t.Errorf("the resumed restore dropped the limit: theirs.txt %q %v", got, err)
	}
}

func TestLimitIndex(t *testing.T) {
	var l limit
	Only(Scope{Path: "/w", Tree: true}, Scope{Path: "/tmp/a/b"}, Scope{Path: "/tmp/d/", Tree: true})(&l)
	for _, c := range []struct {
		p             string
		covers, above bool
	}{
		{"/w", true, false}, {"/w/x/y", true, false}, {"/wx", false, false},
		{"/tmp/a/b", true, false}, {"/tmp/a/b/c", false, false}, {"/tmp/a", false, true},
		{"/tmp", false, true}, {"/", false, true}, {"/tmp/d/e", true, false}, {"/tmp/dd", false, false},
	} {
		if got := l.covers(c.p); got != c.covers {
			t.Errorf("covers(%s) = %v", c.p, got)
		}
		if got := l.above(c.p); got != c.above {
			t.Errorf("above(%s) = %v", c.p, got)
		}
	}
	var off limit
	if !off.covers("/anything") || off.above("/") {
		t.Error("no limit: covers all, above nothing")
	}
	var root limit
	Only(Scope{Path: "/", Tree: true})(&root)
	if !root.covers("/a/b") || root.above("/") {
		t.Error("a root at /")
	}
}

// BenchmarkLimitCovers: a check costs the path's depth, not the number of
// roots (a session may touch tens of thousands of paths).
func BenchmarkLimitCovers(b *testing.B) {
	var l limit
	var roots []Scope
	for i := range 50_000 {
		roots = append(roots, Scope{Path: fmt.Sprintf("/tmp/d%d/f%d", i%100, i)})
	}
	Only(roots...)(&l)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.covers("/tmp/d7/not-touched")
		l.above("/tmp/d7")
	}
}

// TestRestoreAllOverridesAResumedLimit: All finishes an interrupted
// limited restore as a full one (klock rollback --all).
func TestRestoreAllOverridesAResumedLimit(t *testing.T) {
	f := newFixture(t)
	W := f.W
	s := f.take(t, "all")
	write(t, W+"/src/theirs.txt", []byte("theirs\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	testHook = func(op, p string) { cancel() }
	_, err := s.Restore(ctx, Only(Scope{Path: W + "/src/a.txt"}))
	testHook = nil
	if err == nil {
		t.Fatal("the interrupted restore finished")
	}
	if _, err := s.Restore(context.Background(), All()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(W + "/src/theirs.txt"); !os.IsNotExist(err) {
		t.Errorf("All kept theirs.txt (%v)", err)
	}
}

// TestRestoreSparesOthersNew: with the agent's uid recorded, a path new
// since Take that another user owns is another process's and stays
// (reported Spared), what the agent's uid made goes, inside a spared
// directory too, and recorded paths are put back whoever changed them.
// All() removes every new path.
func TestRestoreSparesOthersNew(t *testing.T) {
	testutil.RequirePrivileged(t) // chown to the agent's uid
	f := newFixture(t)
	W := f.W
	agent := uint32(65534)
	must(t, os.Lchown(W+"/src/a.txt", int(agent), int(agent))) // the agent's: it may write it
	must(t, os.Lchown(W+"/src", int(agent), int(agent)))       // and make files here (src/sub stays root's)
	s, err := Take(context.Background(), f.rs, Options{Session: "spare", Scopes: DeclaredScopes(f.rs), AgentUID: &agent})
	must(t, err)
	mine := func(p string) {
		write(t, p, []byte("agent\n"), 0o644)
		must(t, os.Lchown(p, int(agent), int(agent)))
	}
	mine(W + "/src/mine.txt")
	write(t, W+"/src/theirs.txt", []byte("theirs\n"), 0o644) // root's
	write(t, W+"/src/theirdir/x", []byte("x\n"), 0o644)
	mine(W + "/src/theirdir/agents.txt")
	write(t, W+"/src/a.txt", []byte("changed\n"), 0o644) // recorded: put back
	// A root-owned 0644 file root changed: the agent could not have.
	write(t, W+"/src/sub/c.txt", []byte("root's later edit\n"), 0o644)

	rep, err := s.Restore(context.Background(), SpareOthersNew())
	must(t, err)
	for p, want := range map[string]bool{"/src/mine.txt": false, "/src/theirdir/agents.txt": false, "/src/theirs.txt": true, "/src/theirdir/x": true} {
		_, err := os.Lstat(W + p)
		if got := err == nil; got != want {
			t.Errorf("%s exists %v, want %v (%v)", p, got, want, err)
		}
	}
	if got, _ := os.ReadFile(W + "/src/a.txt"); string(got) != "alpha\n" {
		t.Errorf("a.txt = %q: a recorded path was not put back", got)
	}
	if got, _ := os.ReadFile(W + "/src/sub/c.txt"); string(got) != "root's later edit\n" {
		t.Errorf("sub/c.txt = %q: a file the agent could not write was put back", got)
	}
	actions := map[string]Action{}
	for _, e := range rep.Entries {
		actions[e.Path] = e.Action
	}
	if actions[W+"/src/theirs.txt"] != Spared || actions[W+"/src/theirdir"] != Spared || actions[W+"/src/mine.txt"] != Removed {
		t.Errorf("report: theirs.txt %q, theirdir %q, mine.txt %q", actions[W+"/src/theirs.txt"], actions[W+"/src/theirdir"], actions[W+"/src/mine.txt"])
	}

	if _, err := s.Restore(context.Background(), All(), SpareOthersNew()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(W + "/src/theirs.txt"); !os.IsNotExist(err) {
		t.Errorf("All() left a new path: %v", err)
	}
}
