//go:build linux

package snapshot

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

const (
	mbCrashWEnv  = "KLOCK_SNAPSHOT_MB_CRASH_W"
	mbCrashAtEnv = "KLOCK_SNAPSHOT_MB_CRASH_AT"
)

// moveBackCase: B renamed its own file and A's into new names and wrote
// through both.
func moveBackCase(t testing.TB, W string) {
	must(t, os.Rename(W+"/b/own", W+"/b/renamed"))
	writeThrough(t, W+"/b/renamed", []byte("the agent's\n"))
	must(t, os.Rename(W+"/a/file", W+"/b/stolen"))
	writeThrough(t, W+"/b/stolen", []byte("B's edit\n"))
	must(t, os.Rename(W+"/b/d", W+"/b/e"))
}

func moveBackOpts(W string) []RestoreOption {
	return []RestoreOption{Leave(Region{Pattern: mustPattern(W + "/a/**"), Why: whyA}), Reclaim(W + "/a/file")}
}

// TestMoveBackCrashChild is not a test: TestMoveBackCrash re-executes the
// test binary with it selected, to restore until the mbCrashAtEnv-th
// file-system operation, where it kills itself (SIGKILL).
func TestMoveBackCrashChild(t *testing.T) {
	W := os.Getenv(mbCrashWEnv)
	if W == "" {
		return
	}
	at, _ := strconv.Atoi(os.Getenv(mbCrashAtEnv))
	killAtOp(at)
	s, err := Open(filepath.Join(filepath.Dir(W), "backups"), "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restore(context.Background(), moveBackOpts(W)...); err != nil {
		t.Fatal(err)
	}
}

// TestMoveBackCrash kills a restore that moves files back (and then puts
// their content back in place) at every file-system operation it makes,
// the one between the move and the content included, and restores again
// without options (the journal keeps Leave and Reclaim): every file is
// back at its name as the same inode, with its content, nothing else is
// left, and the report of the finishing run still says what was moved.
func TestMoveBackCrash(t *testing.T) {
	testutil.RequirePrivileged(t)
	f := newTwoSessions(t)
	s := f.take(t, false)
	moveBackCase(t, f.W)
	var ops []string
	testHook = func(op, p string) { ops = append(ops, op+" "+p) }
	rep, err := s.Restore(context.Background(), moveBackOpts(f.W)...)
	testHook = nil
	if err != nil {
		t.Fatalf("uninterrupted: %v\n%v", err, rep.Failed())
	}
	mv := slices.IndexFunc(ops, func(o string) bool { return strings.HasPrefix(o, "rename ") })
	ip := slices.IndexFunc(ops, func(o string) bool { return strings.HasPrefix(o, "inplace ") })
	if mv < 0 || ip < mv {
		t.Fatalf("no move back before an in-place write: %v", ops)
	}
	killed := 0
	for at := 1; at <= len(ops); at++ {
		f := newTwoSessions(t)
		f.take(t, false)
		W := f.W
		inos := map[string]uint64{}
		for _, p := range []string{"/a/file", "/b/own", "/b/d", "/b/d/y/z"} {
			inos[p] = inoOf(t, W+p)
		}
		moveBackCase(t, W)
		cmd := exec.Command(os.Args[0], "-test.run=^TestMoveBackCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), mbCrashWEnv+"="+W, mbCrashAtEnv+"="+strconv.Itoa(at))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
			killed++
		case err == nil:
		default:
			t.Fatalf("kill at op %d (%s): %v\n%s", at, ops[at-1], err, out)
		}
		what := fmt.Sprintf("killed at op %d (%s)", at, ops[at-1])
		s2, err := Open(f.root, "b")
		must(t, err)
		// A kill before the journal's begin is durable leaves nothing to
		// resume: the caller passes its options again (a resumed run
		// keeps the journal's, which these repeat).
		rep, err := s2.Restore(context.Background(), moveBackOpts(W)...)
		if err != nil {
			t.Fatalf("%s: restore after: %v\n%v", what, err, rep.Failed())
		}
		wantFile(t, W+"/b/own", "B's file\n", 0o600, inos["/b/own"])
		wantFile(t, W+"/a/file", "A's work\n", 0o640, inos["/a/file"])
		wantFile(t, W+"/b/d/y/z", "z\n", 0o444, inos["/b/d/y/z"])
		if got := inoOf(t, W+"/b/d"); got != inos["/b/d"] {
			t.Errorf("%s: b/d is inode %d, want %d", what, got, inos["/b/d"])
		}
		for _, p := range []string{"/b/renamed", "/b/stolen", "/b/e"} {
			wantGone(t, W+p)
		}
		filepath.Walk(W, func(p string, info os.FileInfo, err error) error {
			if b := filepath.Base(p); err == nil && strings.HasPrefix(b, ".klock-") {
				t.Errorf("%s: left %s", what, p)
			}
			return nil
		})
		if e, _ := reportOf(rep, W+"/a/file"); e.Action != MovedBack || e.Holder != whyA {
			t.Errorf("%s: report of a/file: %+v", what, e)
		}
		if t.Failed() {
			t.Fatalf("%s: ops %v", what, ops)
		}
	}
	t.Logf("%d operations, %d restores killed", len(ops), killed)
	if killed < len(ops)/2 {
		t.Errorf("only %d of %d kills", killed, len(ops))
	}
}

// TestMoveBackRandom: seeded random sequences of link, rename, unlink,
// write, chmod and mkdir over a/ (another session's region: Leave) and b/
// of one scope; then Restore, reclaiming every path touched in a/ (by its
// name, or through another name of its file). No inode that was alive at
// Take and still alive before the restore is lost, each is back at its
// recorded names, and every recorded path is back byte for byte.
func TestMoveBackRandom(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		if !randomCase(t, seed) {
			t.Fatalf("seed %d failed (go test -run TestMoveBackRandom; the seed is the loop index)", seed)
		}
	}
}

type fileState struct {
	typ     uint32
	ino     uint64
	mode    uint32
	content string
	target  string
}

func stateOf(p string) (fileState, bool) {
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil {
		return fileState{}, false
	}
	fs := fileState{typ: st.Mode & unix.S_IFMT, ino: st.Ino, mode: st.Mode & 07777}
	if fs.typ == unix.S_IFREG {
		b, _ := os.ReadFile(p)
		fs.content = string(b)
	}
	return fs, true
}

// liveInodes maps (ino, btime) of everything below W to one of its paths.
func liveInodes(W string) map[[2]int64]string {
	out := map[[2]int64]string{}
	filepath.Walk(W, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		var sx unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME|unix.STATX_INO, &sx) == nil {
			out[[2]int64{int64(sx.Ino), sx.Btime.Sec*1e9 + int64(sx.Btime.Nsec)}] = p
		}
		return nil
	})
	return out
}

func randomCase(t *testing.T, seed int64) (ok bool) {
	rng := rand.New(rand.NewSource(seed))
	base := t.TempDir()
	W := filepath.Join(base, "w")
	var log []string
	defer func() {
		if !ok {
			t.Logf("seed %d: ops:\n  %s", seed, strings.Join(log, "\n  "))
		}
	}()
	// The tree: files (one pair hard-linked), directories, in a/ and b/.
	for _, side := range []string{"a", "b"} {
		write(t, W+"/"+side+"/f1", []byte(side+" one\n"), 0o644)
		write(t, W+"/"+side+"/f2", rnd(seed, 100), 0o600)
		write(t, W+"/"+side+"/d/f3", []byte(side+" three\n"), 0o640)
		write(t, W+"/"+side+"/d/e/f4", []byte(side+" four\n"), 0o444)
		must(t, os.Link(W+"/"+side+"/f1", W+"/"+side+"/d/h1"))
	}
	others := seed%2 == 0
	o := Options{Dir: filepath.Join(base, "backups"), Session: "r", Scopes: []Scope{{Path: W, Tree: true}}}
	if others {
		o.Others = []string{W + "/a"}
	}
	s, err := Take(context.Background(), nil, o)
	must(t, err)
	recorded := map[string]fileState{}
	names := map[uint64][]string{} // a recorded inode's names
	for _, e := range s.Manifest().Entries {
		if e.Anchor || e.Path == W {
			continue
		}
		fs, _ := stateOf(e.Path)
		recorded[e.Path] = fs
		names[fs.ino] = append(names[fs.ino], e.Path)
	}
	atTake := liveInodes(W)

	inA := func(p string) bool { return strings.HasPrefix(p, W+"/a/") }
	reclaim := map[string]bool{}
	touch := func(p string) {
		if inA(p) {
			reclaim[p] = true
		}
		// Through another name: every recorded name of its file.
		if fs, ok := stateOf(p); ok {
			for _, n := range names[fs.ino] {
				if inA(n) {
					reclaim[n] = true
				}
			}
		}
	}
	list := func(files bool) []string {
		var out []string
		filepath.Walk(W, func(p string, info os.FileInfo, err error) error {
			if err != nil || p == W || p == W+"/a" || p == W+"/b" {
				return nil
			}
			if files == info.Mode().IsRegular() || !files && info.IsDir() {
				out = append(out, p)
			}
			return nil
		})
		return out
	}
	newName := func() string {
		dirs := append(list(false), W+"/a", W+"/b")
		return filepath.Join(dirs[rng.Intn(len(dirs))], fmt.Sprintf("n%d", rng.Intn(6)))
	}
	pick := func(ps []string) string {
		if len(ps) == 0 {
			return ""
		}
		return ps[rng.Intn(len(ps))]
	}
	steps := 3 + rng.Intn(12)
	for k := 0; k < steps; k++ {
		files := list(true)
		all := append(list(false), files...)
		switch rng.Intn(7) {
		case 0: // link
			src, dst := pick(files), newName()
			if src != "" && os.Link(src, dst) == nil {
				touch(src)
				touch(dst)
				log = append(log, "link "+src+" "+dst)
			}
		case 1, 2: // rename (over an existing name, sometimes)
			src := pick(all)
			dst := newName()
			if rng.Intn(3) == 0 {
				dst = pick(all)
			}
			if src != "" {
				touch(src)
				touch(dst)
				if os.Rename(src, dst) == nil {
					log = append(log, "rename "+src+" "+dst)
				}
			}
		case 3: // unlink
			if p := pick(files); p != "" {
				touch(p)
				must(t, os.Remove(p))
				log = append(log, "unlink "+p)
			}
		case 4: // write through
			if p := pick(files); p != "" {
				touch(p)
				writeThrough(t, p, rnd(rng.Int63(), rng.Intn(200)))
				log = append(log, "write "+p)
			}
		case 5: // chmod
			if p := pick(files); p != "" {
				touch(p)
				must(t, os.Chmod(p, 0o600|os.FileMode(rng.Intn(0o100))))
				log = append(log, "chmod "+p)
			}
		case 6: // mkdir
			if p := newName(); os.Mkdir(p, 0o755) == nil {
				touch(p)
				log = append(log, "mkdir "+p)
			}
		}
	}
	before := liveInodes(W)
	var rc []string
	for p := range reclaim {
		rc = append(rc, p)
	}
	log = append(log, "reclaim "+strings.Join(rc, " "))
	rep, err := s.Restore(context.Background(), SpareOthersNew(), Leave(Region{Pattern: mustPattern(W + "/a/**"), Why: whyA}), Reclaim(rc...))
	if err != nil {
		t.Errorf("seed %d: Restore: %v\n%v", seed, err, rep.Failed())
		return false
	}
	after := liveInodes(W)
	ok = true
	for id, p := range before {
		if _, wasThere := atTake[id]; !wasThere {
			continue
		}
		if _, alive := after[id]; !alive {
			t.Errorf("seed %d: inode %d (at %s before the restore, there at Take) was lost", seed, id[0], p)
			ok = false
		}
	}
	for p, want := range recorded {
		got, exists := stateOf(p)
		if !exists {
			t.Errorf("seed %d: %s missing", seed, p)
			ok = false
			continue
		}
		if got.typ != want.typ || got.content != want.content || got.mode != want.mode {
			t.Errorf("seed %d: %s: type %o mode %o %q, want type %o mode %o %q", seed, p, got.typ, got.mode, got.content, want.typ, want.mode, want.content)
			ok = false
		}
		// Back at its recorded name, if its file was alive before the
		// restore (the agent may have ended it: renamed over, unlinked).
		for id := range before {
			if uint64(id[0]) == want.ino {
				if _, wasThere := atTake[id]; wasThere && got.ino != want.ino {
					t.Errorf("seed %d: %s is inode %d, want %d (alive before the restore)", seed, p, got.ino, want.ino)
					ok = false
				}
			}
		}
	}
	// Nothing new is left in b/ (the agent's), nor Restore's own names.
	filepath.Walk(W, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == W || p == W+"/a" || p == W+"/b" {
			return nil
		}
		if _, rec := recorded[p]; !rec && !inA(p) {
			t.Errorf("seed %d: %s left (not recorded)", seed, p)
			ok = false
		}
		if strings.HasPrefix(filepath.Base(p), ".klock-") {
			t.Errorf("seed %d: %s left", seed, p)
			ok = false
		}
		return nil
	})
	return ok
}

func mustPattern(p string) policy.PathPattern {
	pp, err := policy.ParsePathPattern(p)
	if err != nil {
		panic(err)
	}
	return pp
}
