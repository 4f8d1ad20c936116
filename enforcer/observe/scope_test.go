//go:build linux && (amd64 || arm64)

package observe

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCountedDirectory: once CountIn names a read's directory, reads of
// other files directly in it are counted, not reported, and TakeCounted
// hands the count over; what the count must not stand for is still
// reported one by one: a write, a file with a second name (hard link), a
// file in a subdirectory, a file in another directory, and any read after
// a rename (the names may have moved).
func TestCountedDirectory(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir, other := t.TempDir(), t.TempDir()
	for _, f := range []string{"a", "b", "c", "d", "w", "h", "sub/e", "r1"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
		os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644)
	}
	os.WriteFile(filepath.Join(other, "o"), []byte("x"), 0o644)
	if err := os.Link(filepath.Join(dir, "h"), filepath.Join(other, "h2")); err != nil {
		t.Fatal(err)
	}
	run := func(script string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = dir
		s.inCgroup(cmd)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", script, err, out)
		}
	}
	a := filepath.Join(dir, "a")
	run(": < a")
	var first Record
	s.collect(t, func(rs []Record) bool {
		for _, r := range rs {
			if r.Kind == KindEvent && r.Event.Triple.Path == a {
				first = r
				return true
			}
		}
		return false
	})
	if !Countable(first) {
		t.Fatalf("the read of %s is not countable: %+v", a, first)
	}
	if ok, err := s.w.CountIn(first); !ok || err != nil {
		t.Fatalf("CountIn: %v %v", ok, err)
	}
	run(": < a; : < b; : < c; : < b; : < h; : >> w; : < sub/e; : < " + filepath.Join(other, "o") +
		"; /bin/mv r1 r2; : < d")
	if err := o.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	counted, err := s.w.TakeCounted()
	if err != nil {
		t.Fatal(err)
	}
	s.drain(t)
	reported := map[string]int{}
	for _, r := range s.got {
		if r.Kind == KindEvent && r.Event.Syscall == "openat" {
			reported[r.Event.Triple.Path]++
		}
	}
	for _, f := range []string{"b", "c"} {
		if n := reported[filepath.Join(dir, f)]; n != 0 {
			t.Errorf("%s: reported %d times, want counted", f, n)
		}
	}
	// a: the first read, reported; the second counted as its repeat
	// (Repeats), not in the directory.
	if n := reported[a]; n != 1 {
		t.Errorf("a: reported %d times, want 1", n)
	}
	for _, p := range []string{filepath.Join(dir, "h"), filepath.Join(dir, "w"), filepath.Join(dir, "sub/e"), filepath.Join(other, "o"), filepath.Join(dir, "d")} {
		if reported[p] == 0 {
			t.Errorf("%s: not reported; got:\n%s", p, describe(s.got))
		}
	}
	if len(counted) != 1 || counted[0].Dir != dir || counted[0].N != 3 || counted[0].Rec.Event.Triple.Path != a {
		t.Errorf("counted %+v, want 3 reads (b, c, b) in %s under the read of a", counted, dir)
	}
	// Taken: the kernel counts there no more, and Unwatch left nothing.
	var k scopeKey
	var v uint64
	for it := o.objs.Scoped.Iterate(); it.Next(&k, &v); {
		if k.Cgid == s.g.ID {
			t.Fatalf("counted directory of cgroup %d outlived TakeCounted and Unwatch: %+v", k.Cgid, k)
		}
	}
}
