//go:build linux

package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// listAll lists every path under dir (relative, sorted).
func listAll(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func mountTmpfs(t testing.TB, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		testutil.Unavailable(t, "mount tmpfs: "+err.Error())
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func bigTree(t testing.TB, n, size int) *policy.Ruleset {
	W := t.TempDir()
	for i := 0; i < n; i++ {
		write(t, filepath.Join(W, "data", "f"+string(rune('a'+i%26))+string(rune('a'+i/26))), rnd(int64(i), size), 0o644)
	}
	return &policy.Ruleset{Workdir: W, Files: []policy.PathRule{rule(W+"/data", policy.MatchSubtree, policy.Mutates)}}
}

// TestTakeNoSpace: backups onto a 2 MiB tmpfs of a 8 MiB tree fail with
// ErrNoSpace naming the path, leave the backup root exactly as it was
// (empty when it was new, the old session when there was one), and leave
// the source tree untouched.
func TestTakeNoSpace(t *testing.T) {
	testutil.RequirePrivileged(t)
	mnt := mountTmpfs(t, "size=2m")
	rs := bigTree(t, 16, 512<<10)
	src := treeState(t, rs.Workdir)
	root := filepath.Join(mnt, "backups")
	_, err := Take(context.Background(), rs, Options{Dir: root, Session: "big"})
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Take onto a full tmpfs: %v, want ErrNoSpace wrapping ENOSPC", err)
	}
	var se *Error
	if !errors.As(err, &se) || !strings.HasPrefix(se.Path, rs.Workdir+"/data/") || !strings.Contains(err.Error(), se.Path) || !strings.Contains(err.Error(), "free space") {
		t.Errorf("error should name the file being copied and say what would fix it: %v", err)
	}
	t.Logf("error: %v", err)
	if got := listAll(t, mnt); len(got) != 0 {
		t.Errorf("left behind in the backup filesystem: %v", got)
	}
	requireSameTree(t, "source after failed Take", src, treeState(t, rs.Workdir))

	// With an earlier session in the root: it survives, nothing else does.
	small := bigTree(t, 3, 64<<10)
	if _, err := Take(context.Background(), small, Options{Dir: root, Session: "small"}); err != nil {
		t.Fatal(err)
	}
	was := listAll(t, root)
	if _, err := Take(context.Background(), rs, Options{Dir: root, Session: "big"}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("second Take: %v", err)
	}
	if got := listAll(t, root); strings.Join(got, "\n") != strings.Join(was, "\n") {
		t.Errorf("backup root changed by a failed Take:\nwas %v\nnow %v", was, got)
	}
	if l, _ := List(root); len(l) != 1 || l[0].Session != "small" {
		t.Errorf("List after failure: %+v", l)
	}
}

// TestTakeReadOnly: a read-only backup filesystem is ErrPermission.
func TestTakeReadOnly(t *testing.T) {
	testutil.RequirePrivileged(t)
	mnt := mountTmpfs(t, "size=1m")
	must(t, unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""))
	rs := bigTree(t, 2, 10)
	_, err := Take(context.Background(), rs, Options{Dir: filepath.Join(mnt, "b"), Session: "s"})
	if !errors.Is(err, ErrPermission) || !errors.Is(err, unix.EROFS) {
		t.Fatalf("Take onto a read-only fs: %v, want ErrPermission wrapping EROFS", err)
	}
	t.Logf("error: %v", err)
}

func countObjects(t testing.TB, root string) int {
	n := 0
	for _, p := range listAll(t, filepath.Join(root, objectsDir)) {
		if strings.Contains(p, "/") {
			n++
		}
	}
	return n
}

// TestWarmDedupGC: a warm Take of an unchanged tree reads nothing (index
// hits only), sessions share objects, List reports them, GC keeps the
// newest N and removes exactly the objects no kept session references.
func TestWarmDedupGC(t *testing.T) {
	f := newFixture(t)
	time.Sleep(2 * racyWindow * time.Nanosecond) // older than the racy window
	s1 := f.take(t, "s1")
	files := s1.Stats.Files
	if s1.Stats.Copied == 0 || s1.Stats.IndexHits != 0 {
		t.Fatalf("cold: %+v", s1.Stats)
	}
	root := filepath.Dir(s1.Dir())
	objs := countObjects(t, root)
	s2 := f.take(t, "s2")
	if s2.Stats.Copied != 0 || s2.Stats.Hashed != 0 || s2.Stats.IndexHits != files {
		t.Errorf("warm Take of an unchanged tree: %+v, want only index hits", s2.Stats)
	}
	if countObjects(t, root) != objs {
		t.Errorf("warm Take added objects")
	}
	// One file changes: one copy, one new object.
	write(t, f.W+"/src/a.txt", []byte("changed for s3\n"), 0o644)
	s3 := f.take(t, "s3")
	if s3.Stats.Copied != 1 || s3.Stats.IndexHits != files-1 {
		t.Errorf("Take after one change: %+v", s3.Stats)
	}
	if countObjects(t, root) != objs+1 {
		t.Errorf("objects: %d, want %d", countObjects(t, root), objs+1)
	}
	// A second workdir with the same content dedupes against the store.
	infos, err := List(root)
	must(t, err)
	if len(infos) != 3 || infos[0].Session != "s1" || infos[2].Session != "s3" {
		t.Fatalf("List: %+v", infos)
	}
	if infos[0].Files != files || infos[0].Bytes == 0 || infos[0].NewBytes == 0 || infos[1].NewBytes != 0 {
		t.Errorf("List info: %+v", infos)
	}
	rep, err := GC(root, 1)
	must(t, err)
	if strings.Join(rep.Removed, ",") != "s1,s2" || strings.Join(rep.Kept, ",") != "s3" || rep.ObjectsRemoved != 1 {
		t.Errorf("GC: %+v", rep)
	}
	if countObjects(t, root) != objs {
		t.Errorf("after GC: %d objects, want %d", countObjects(t, root), objs)
	}
	// The kept session still restores, from the objects that are left.
	write(t, f.W+"/src/b.txt", []byte("x"), 0o644)
	before := s3.Manifest()
	if _, err := s3.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	s3b, err := Open(root, "s3")
	must(t, err)
	if len(s3b.Manifest().Entries) != len(before.Entries) {
		t.Error("Open reads a different manifest")
	}
	if rep, _ := GC(root, 0); len(rep.Removed) != 1 || countObjects(t, root) != 0 {
		t.Errorf("GC keep 0: %+v, %d objects", rep, countObjects(t, root))
	}
}
