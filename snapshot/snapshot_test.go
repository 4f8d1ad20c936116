//go:build linux

package snapshot

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func write(t testing.TB, p string, data []byte, mode os.FileMode) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, data, mode))
	must(t, os.Chmod(p, mode))
}

func rnd(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func rule(p string, m policy.Match, preds ...policy.Predicate) policy.PathRule {
	var g policy.Access
	for _, pr := range preds {
		g |= policy.Grants(pr)
	}
	return policy.PathRule{Pattern: policy.PathPattern{Path: p, Match: m}, Access: policy.AccessOf(preds...), Grants: g}
}

// fixture builds a tree in a fresh temp dir:
//
//	src/   MUTATES DELETES RENAMES PROVIDES (files, dirs, symlink, hard
//	       links, a fifo, xattrs, odd modes and owners)
//	build/ PROVIDES DELETES (one existing file)
//	docs/  CONSUMES only: never recorded, never touched
type fixture struct {
	W  string
	rs *policy.Ruleset
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	W := t.TempDir()
	root := os.Geteuid() == 0
	write(t, W+"/src/a.txt", []byte("alpha\n"), 0o644)
	write(t, W+"/src/b.txt", []byte("bravo bravo\n"), 0o640)
	write(t, W+"/src/big.bin", rnd(1, 300<<10), 0o600)
	write(t, W+"/src/empty", nil, 0o644)
	write(t, W+"/src/sub/c.txt", []byte("charlie\n"), 0o644)
	write(t, W+"/src/sub/deep/d.txt", []byte("delta\n"), 0o444)
	write(t, W+"/src/exec.sh", []byte("#!/bin/sh\necho hi\n"), 0o755)
	write(t, W+"/src/hl1", []byte("hard link group\n"), 0o644)
	must(t, os.Link(W+"/src/hl1", W+"/src/hl2"))
	must(t, os.Link(W+"/src/hl1", W+"/src/sub/hl3"))
	must(t, os.Symlink("a.txt", W+"/src/link"))
	must(t, os.Symlink("/nonexistent/target", W+"/src/dangling"))
	must(t, unix.Mkfifo(W+"/src/fifo", 0o620))
	must(t, os.Mkdir(W+"/src/emptydir", 0o711))
	must(t, unix.Lsetxattr(W+"/src/b.txt", "user.x", []byte("x-value"), 0))
	must(t, unix.Lsetxattr(W+"/src/sub", "user.dir", []byte{0, 1, 2}, 0))
	if root {
		must(t, os.Lchown(W+"/src/b.txt", 1000, 1000))
		must(t, os.Lchown(W+"/src/link", 1001, 1002))
		must(t, os.Chown(W+"/src/sub/deep", 2000, 2001))
		must(t, unix.Lsetxattr(W+"/src/a.txt", "security.klocktest", []byte("sec"), 0))
		write(t, W+"/src/setuid", []byte("suid"), 0o644)
		must(t, os.Chmod(W+"/src/setuid", 0o4755|os.ModeSetuid))
		must(t, unix.Chmod(W+"/src/setuid", 0o4755))
	}
	must(t, unix.Chmod(W+"/src/sub", 0o1775))
	write(t, W+"/build/old.o", []byte("old object"), 0o644)
	write(t, W+"/docs/readme", []byte("read me"), 0o644)
	// Old, distinct times everywhere so a restore that forgets them shows.
	i := 0
	filepath.Walk(W, func(p string, info os.FileInfo, err error) error {
		i++
		ts := time.Date(2020, 1, 2, 3, 4, 5, i*1000+7, time.UTC)
		unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{unix.NsecToTimespec(ts.UnixNano()), unix.NsecToTimespec(ts.UnixNano() + 1)}, unix.AT_SYMLINK_NOFOLLOW)
		return nil
	})
	rs := &policy.Ruleset{Workdir: W, Files: []policy.PathRule{
		rule(W, policy.MatchSubtree, policy.Consumes),
		rule(W+"/build", policy.MatchSubtree, policy.Provides, policy.Deletes),
		rule(W+"/src", policy.MatchSubtree, policy.Mutates, policy.Deletes, policy.Renames, policy.Provides),
	}}
	return &fixture{W: W, rs: rs}
}

func (f *fixture) take(t testing.TB, session string) *Snapshot {
	t.Helper()
	s, err := Take(context.Background(), f.rs, Options{Session: session, Scopes: DeclaredScopes(f.rs)})
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return s
}

type mutation struct {
	name string
	root bool // needs root
	do   func(t testing.TB, W string)
	// want: path -> action the report must show for it (relative to W)
	want map[string]Action
}

func mutations() []mutation {
	return []mutation{
		{name: "modify same size", do: func(t testing.TB, W string) { write(t, W+"/src/a.txt", []byte("ALPHA\n"), 0o644) }, want: map[string]Action{"src/a.txt": Restored}},
		{name: "append", do: func(t testing.TB, W string) {
			f, err := os.OpenFile(W+"/src/b.txt", os.O_APPEND|os.O_WRONLY, 0)
			must(t, err)
			f.WriteString("more\n")
			f.Close()
		}, want: map[string]Action{"src/b.txt": Restored}},
		{name: "truncate", do: func(t testing.TB, W string) { must(t, os.Truncate(W+"/src/big.bin", 10)) }, want: map[string]Action{"src/big.bin": Restored}},
		{name: "delete file", do: func(t testing.TB, W string) { must(t, os.Remove(W+"/src/sub/c.txt")) }, want: map[string]Action{"src/sub/c.txt": Recreated}},
		{name: "delete tree", do: func(t testing.TB, W string) { must(t, os.RemoveAll(W+"/src/sub")) }, want: map[string]Action{"src/sub": Recreated, "src/sub/deep/d.txt": Recreated, "src/sub/hl3": Recreated}},
		{name: "rename file", do: func(t testing.TB, W string) { must(t, os.Rename(W+"/src/a.txt", W+"/src/a2.txt")) }, want: map[string]Action{"src/a.txt": MovedBack}},
		{name: "rename dir", do: func(t testing.TB, W string) { must(t, os.Rename(W+"/src/sub", W+"/src/sub2")) }, want: map[string]Action{"src/sub": MovedBack}},
		{name: "rename over", do: func(t testing.TB, W string) { must(t, os.Rename(W+"/src/a.txt", W+"/src/b.txt")) }, want: map[string]Action{"src/a.txt": MovedBack, "src/b.txt": Restored}},
		{name: "create files and dirs", do: func(t testing.TB, W string) {
			write(t, W+"/src/new.txt", []byte("new"), 0o644)
			write(t, W+"/src/newdir/x/y", []byte("y"), 0o644)
			write(t, W+"/build/out.o", []byte("out"), 0o644)
			must(t, os.Mkdir(W+"/build/obj", 0o755))
			must(t, os.Symlink("x", W+"/src/newlink"))
		}, want: map[string]Action{"src/new.txt": Removed, "src/newdir": Removed, "build/out.o": Removed, "build/obj": Removed, "src/newlink": Removed}},
		{name: "overwrite in PROVIDES scope", do: func(t testing.TB, W string) { write(t, W+"/build/old.o", []byte("clobbered!"), 0o644) }, want: map[string]Action{"build/old.o": Restored}},
		{name: "chmod", do: func(t testing.TB, W string) {
			must(t, os.Chmod(W+"/src/b.txt", 0o755))
			must(t, os.Chmod(W+"/src/sub", 0o700))
		}, want: map[string]Action{"src/b.txt": Restored, "src/sub": Restored}},
		{name: "chown", root: true, do: func(t testing.TB, W string) {
			must(t, os.Lchown(W+"/src/b.txt", 0, 0))
			must(t, os.Lchown(W+"/src/link", 5, 5))
			must(t, os.Lchown(W+"/src/setuid", 7, 7)) // also clears setuid
		}, want: map[string]Action{"src/b.txt": Restored, "src/link": Restored, "src/setuid": Restored}},
		{name: "utimes", do: func(t testing.TB, W string) {
			now := time.Now()
			must(t, os.Chtimes(W+"/src/exec.sh", now, now))
		}, want: map[string]Action{"src/exec.sh": Restored}},
		{name: "user xattrs", do: func(t testing.TB, W string) {
			must(t, unix.Lsetxattr(W+"/src/a.txt", "user.new", []byte("n"), 0))
			must(t, unix.Lremovexattr(W+"/src/b.txt", "user.x"))
			must(t, unix.Lsetxattr(W+"/src/sub", "user.dir", []byte("changed"), 0))
		}, want: map[string]Action{"src/a.txt": Restored, "src/b.txt": Restored, "src/sub": Restored}},
		{name: "security xattrs", root: true, do: func(t testing.TB, W string) {
			must(t, unix.Lsetxattr(W+"/src/a.txt", "security.klocktest", []byte("tampered"), 0))
			must(t, unix.Lsetxattr(W+"/src/exec.sh", "security.other", []byte("o"), 0))
		}, want: map[string]Action{"src/a.txt": Restored, "src/exec.sh": Restored}},
		{name: "retarget symlink", do: func(t testing.TB, W string) {
			must(t, os.Remove(W+"/src/link"))
			must(t, os.Symlink("b.txt", W+"/src/link"))
		}, want: map[string]Action{"src/link": Restored}},
		{name: "symlink replaced by file", do: func(t testing.TB, W string) {
			must(t, os.Remove(W+"/src/dangling"))
			write(t, W+"/src/dangling", []byte("now a file"), 0o644)
		}, want: map[string]Action{"src/dangling": Restored}},
		{name: "file replaced by dir", do: func(t testing.TB, W string) {
			must(t, os.Remove(W+"/src/empty"))
			write(t, W+"/src/empty/inside", []byte("i"), 0o644)
		}, want: map[string]Action{"src/empty": Restored}},
		{name: "break hard link", do: func(t testing.TB, W string) {
			must(t, os.Remove(W+"/src/hl2"))
			write(t, W+"/src/hl2", []byte("hard link group\n"), 0o644)
		}, want: map[string]Action{"src/hl2": Restored}},
		{name: "write through hard link", do: func(t testing.TB, W string) {
			write(t, W+"/src/sub/hl3", []byte("changed via hl3\n"), 0o644)
		}, want: map[string]Action{"src/hl1": Restored}},
		{name: "create hard links", do: func(t testing.TB, W string) {
			must(t, os.Link(W+"/src/a.txt", W+"/src/a-hl"))
			must(t, os.Link(W+"/src/big.bin", W+"/build/big-hl"))
		}, want: map[string]Action{"src/a-hl": Removed, "build/big-hl": Removed}},
		{name: "delete fifo and empty dir", do: func(t testing.TB, W string) {
			must(t, os.Remove(W+"/src/fifo"))
			must(t, os.Remove(W+"/src/emptydir"))
		}, want: map[string]Action{"src/fifo": Recreated, "src/emptydir": Recreated}},
		{name: "mmap write", do: func(t testing.TB, W string) { mmapWrite(t, W+"/src/big.bin") }, want: map[string]Action{"src/big.bin": Restored}},
		{name: "delete PROVIDES dir's file", do: func(t testing.TB, W string) { must(t, os.RemoveAll(W+"/build")) }, want: map[string]Action{"build": Recreated, "build/old.o": Recreated}},
	}
}

func mmapWrite(t testing.TB, p string) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	must(t, err)
	copy(b[100:], "written through mmap")
	must(t, unix.Msync(b, unix.MS_SYNC))
	must(t, unix.Munmap(b))
}

// TestRestoreMutations: one mutation per case, then all at once; Restore
// must give back the identical tree (by treeState), report the right
// actions, and a second Restore must change nothing.
func TestRestoreMutations(t *testing.T) {
	testutil.RequirePrivileged(t) // chown, security.* xattrs
	cases := append(mutations(), mutation{name: "all at once", do: allAtOnce})
	for _, m := range cases {
		t.Run(m.name, func(t *testing.T) {
			f := newFixture(t)
			s := f.take(t, "s1")
			before := treeState(t, f.W)
			m.do(t, f.W)
			if len(diffTrees(before, treeState(t, f.W))) == 0 {
				t.Fatal("the mutation changed nothing: the case tests nothing")
			}
			rep, err := s.Restore(context.Background())
			if err != nil {
				t.Fatalf("Restore: %v\n%v", err, rep.Failed())
			}
			requireSameTree(t, "after restore", before, treeState(t, f.W))
			got := map[string]Action{}
			for _, e := range rep.Entries {
				rel, _ := filepath.Rel(f.W, e.Path)
				got[rel] = e.Action
			}
			for p, a := range m.want {
				if got[p] != a {
					t.Errorf("report: %s is %q, want %q (changed: %v)", p, got[p], a, rep.Changed())
				}
			}
			if _, ok := got["docs/readme"]; ok {
				t.Error("docs/readme is outside every scope but is in the report")
			}
			// Idempotent: nothing left to do.
			rep2, err := s.Restore(context.Background())
			if err != nil {
				t.Fatalf("second Restore: %v", err)
			}
			if ch := rep2.Changed(); len(ch) != 0 {
				t.Errorf("second Restore changed %v", ch)
			}
			requireSameTree(t, "after second restore", before, treeState(t, f.W))
		})
	}
}

// allAtOnce applies every mutation that still applies, in order.
func allAtOnce(t testing.TB, W string) {
	for _, m := range mutations() {
		switch m.name {
		case "delete tree", "rename dir", "rename over", "delete PROVIDES dir's file", "break hard link", "rename file":
			continue // they would make later cases fail; the rest covers them
		}
		m.do(t, W)
	}
	must(t, os.Rename(W+"/src/sub", W+"/src/sub2"))
	must(t, os.RemoveAll(W+"/build"))
	must(t, os.Rename(W+"/src/a.txt", W+"/src/a2.txt"))
	must(t, os.Rename(W+"/src/exec.sh", W+"/src/b.txt"))
}

func TestTakeScopeContents(t *testing.T) {
	f := newFixture(t)
	s := f.take(t, "s1")
	paths := map[string]Entry{}
	for _, e := range s.Manifest().Entries {
		paths[e.Path] = e
	}
	for _, p := range []string{"/src/a.txt", "/src/sub/deep/d.txt", "/src/link", "/src/fifo", "/build/old.o", "/build", "/src"} {
		if _, ok := paths[f.W+p]; !ok {
			t.Errorf("%s not recorded", p)
		}
	}
	if e := paths[f.W]; !e.Anchor {
		t.Errorf("workdir should be an anchor: %+v", e)
	}
	for p := range paths {
		if strings.HasPrefix(p, f.W+"/docs") || strings.HasPrefix(p, f.W+"/.klock") {
			t.Errorf("%s recorded: outside the scopes", p)
		}
	}
	if e := paths[f.W+"/src/hl2"]; e.Link != f.W+"/src/hl1" || e.Hash == "" {
		t.Errorf("hl2 should link to hl1 with its hash: %+v", e)
	}
	if e := paths[f.W+"/src/b.txt"]; string(e.Xattrs["user.x"]) != "x-value" {
		t.Errorf("xattrs not recorded: %+v", e.Xattrs)
	}
	if e := paths[f.W+"/src/link"]; e.Target != "a.txt" {
		t.Errorf("symlink target: %+v", e)
	}
	if s.Stats.Copied == 0 || s.Stats.Files != s.Stats.Copied+s.Stats.IndexHits {
		t.Errorf("stats: %+v", s.Stats)
	}
}

func TestScopes(t *testing.T) {
	W := t.TempDir()
	write(t, W+"/src/x.go", nil, 0o644)
	write(t, W+"/notes.txt", nil, 0o644)
	write(t, W+"/out/keep", nil, 0o644)
	rs := &policy.Ruleset{Workdir: W, Files: []policy.PathRule{
		rule(W, policy.MatchSubtree, policy.Consumes),
		rule(W+"/notes.txt", policy.MatchExact, policy.Mutates),
		rule(W+"/out", policy.MatchChildren, policy.Provides),
		rule(W+"/src", policy.MatchSubtree, policy.Mutates),
		rule(W+"/gen/new.txt", policy.MatchExact, policy.Provides),
	}}
	got := DeclaredScopes(rs)
	want := []Scope{{W + "/gen/new.txt", false}, {W + "/notes.txt", false}, {W + "/out", true}, {W + "/src", true}}
	if !slices.Equal(got, want) {
		t.Errorf("DeclaredScopes = %v, want %v", got, want)
	}
	// The wall: creating gen/new.txt is walled at the nearest existing
	// directory, W itself, so everything in W is in the wall.
	if got := WallScopes(rs); !slices.Equal(got, []Scope{{W, true}}) {
		t.Errorf("WallScopes = %v, want [%s/**]", got, W)
	}
	rs.Files = rs.Files[:4]
	wall := WallScopes(rs)
	if !slices.Equal(wall, []Scope{{W + "/notes.txt", false}, {W + "/out", true}, {W + "/src", true}}) {
		t.Errorf("WallScopes without PROVIDES exact = %v", wall)
	}
	rs.Files = append(rs.Files, rule(W+"/notes.txt", policy.MatchExact, policy.Deletes))
	if wall := WallScopes(rs); !slices.Equal(wall, []Scope{{W, true}}) {
		t.Errorf("deleting notes.txt is a right on %s: WallScopes = %v", W, wall)
	}
	// Deleting W itself would be a right on W's parent, which the wall
	// does not grant (policy.RootRemovable): the parent is not backed up.
	rs.Files = append(rs.Files, rule(W, policy.MatchSubtree, policy.Deletes))
	if wall := WallScopes(rs); !slices.Equal(wall, []Scope{{W, true}}) {
		t.Errorf("DELETES %s/**: WallScopes = %v, want [%s/**] (not its parent)", W, wall, W)
	}
	rs.Files = append(rs.Files, rule(W+"/src", policy.MatchSubtree, policy.Deletes))
	if wall := WallScopes(rs); !slices.Equal(wall, []Scope{{W, true}}) {
		t.Errorf("DELETES %s/src/**: WallScopes = %v", W, wall)
	}
	if err := checkScopes([]Scope{{"/", true}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("/** accepted: %v", err)
	}
}

func TestSessionErrors(t *testing.T) {
	f := newFixture(t)
	f.take(t, "s1")
	_, err := Take(context.Background(), f.rs, Options{Session: "s1", Scopes: DeclaredScopes(f.rs)})
	if !errors.Is(err, ErrExists) {
		t.Errorf("second Take of s1: %v, want ErrExists", err)
	}
	for _, bad := range []string{"", ".hidden", "a/b", "objects", "index", strings.Repeat("x", 200)} {
		if _, err := Take(context.Background(), f.rs, Options{Session: bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("session %q: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := Open(filepath.Join(f.W, ".klock/backups"), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open missing: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Take(ctx, f.rs, Options{Session: "s2", Scopes: DeclaredScopes(f.rs)}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled Take: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.W, ".klock/backups/.tmp-s2")); err == nil {
		t.Error("canceled Take left its temp directory")
	}
}

func TestProgress(t *testing.T) {
	if TerminalProgress(&bytes.Buffer{}) != nil {
		t.Error("a buffer is not a terminal")
	}
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	if TerminalProgress(devnull) != nil {
		t.Error("/dev/null is not a terminal")
	}
	f := newFixture(t)
	var last, total int64
	calls := 0
	_, err := Take(context.Background(), f.rs, Options{Session: "p", Scopes: DeclaredScopes(f.rs), Progress: func(d, tot int64) { last, total = d, tot; calls++ }})
	must(t, err)
	if calls == 0 || last != total || total == 0 {
		t.Errorf("progress: %d calls, last %d/%d", calls, last, total)
	}
}

// TestTakeWhileOthersChangeTheScope: the agent has not started while its
// backup is taken, so a change to a scope meanwhile is another process's,
// and in a shared scope (/tmp) they never stop. A file removed after the
// walk listed it is not backed up (it was not there when the agent
// started: a rollback removes what the agent makes there), and a file
// replaced by another is backed up as it now is. Before, either made the
// session fail to start.
func TestTakeWhileOthersChangeTheScope(t *testing.T) {
	f := newFixture(t)
	W := f.W
	afterWalk = func() {
		must(t, os.Remove(W+"/src/a.txt"))
		write(t, W+"/src/new-exec.sh", []byte("replaced\n"), 0o755)
		must(t, os.Rename(W+"/src/new-exec.sh", W+"/src/exec.sh"))
	}
	t.Cleanup(func() { afterWalk = nil })
	s := f.take(t, "s1")
	afterWalk = nil
	var st unix.Stat_t
	must(t, unix.Stat(W+"/src/exec.sh", &st))
	found := map[string]Entry{}
	for _, e := range s.Manifest().Entries {
		found[e.Path] = e
	}
	if _, ok := found[W+"/src/a.txt"]; ok {
		t.Error("src/a.txt was removed before it was read, yet it is in the backup")
	}
	if e := found[W+"/src/exec.sh"]; e.Ino != st.Ino || e.Hash == "" {
		t.Errorf("src/exec.sh recorded with inode %d hash %q, want the replacing file's inode %d and its content", e.Ino, e.Hash, st.Ino)
	}
	if s.Stats.Entries != len(s.Manifest().Entries) {
		t.Errorf("stats say %d entries, the manifest has %d", s.Stats.Entries, len(s.Manifest().Entries))
	}
	// What the agent then does is undone back to that state.
	write(t, W+"/src/exec.sh", []byte("agent's edit\n"), 0o755)
	write(t, W+"/src/a.txt", []byte("agent's new file\n"), 0o644)
	if _, err := s.Restore(context.Background()); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got, _ := os.ReadFile(W + "/src/exec.sh"); string(got) != "replaced\n" {
		t.Errorf("src/exec.sh = %q after restore, want the content it had when the agent started", got)
	}
	if _, err := os.Lstat(W + "/src/a.txt"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("src/a.txt after restore: %v, want it removed (it did not exist when the agent started)", err)
	}

	// The same when the index knew the file (it is hashed before it is
	// copied): touched, so its stat no longer matches, then removed.
	now := time.Now()
	must(t, os.Chtimes(W+"/src/b.txt", now, now))
	afterWalk = func() { must(t, os.Remove(W+"/src/b.txt")) }
	s3 := f.take(t, "s3")
	afterWalk = nil
	for _, e := range s3.Manifest().Entries {
		if e.Path == W+"/src/b.txt" {
			t.Error("src/b.txt was removed before it was hashed, yet it is in the backup")
		}
	}

	// A hard-link group's leader removed while its other names stay: the
	// backup cannot drop it, and says so.
	g := newFixture(t)
	afterWalk = func() { must(t, os.Remove(g.W+"/src/hl1")) }
	_, err := Take(context.Background(), g.rs, Options{Session: "s2", Scopes: DeclaredScopes(g.rs)})
	afterWalk = nil
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "another name of the same file") {
		t.Fatalf("Take with a removed link leader: %v, want ErrChanged naming the other names", err)
	}
}

// TestLinkMembersKeepTheirHashWhenAFileGoes: a file removed while the
// backup is taken drops out of it, and the hard-link group beside it still
// records every member with its leader's content hash (the manifest is
// the entries kept, which must carry the hashes too).
func TestLinkMembersKeepTheirHashWhenAFileGoes(t *testing.T) {
	f := newFixture(t)
	afterWalk = func() { must(t, os.Remove(f.W+"/src/b.txt")) }
	s := f.take(t, "gone")
	afterWalk = nil
	members := 0
	for _, e := range s.Manifest().Entries {
		if e.Link == "" {
			continue
		}
		members++
		if e.Hash == "" {
			t.Errorf("hard-link member %s (of %s) has no content hash", e.Path, e.Link)
		}
	}
	if members != 2 {
		t.Fatalf("%d hard-link members in the manifest, want 2 (hl2, sub/hl3)", members)
	}
}
