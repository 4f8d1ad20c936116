//go:build linux && (amd64 || arm64)

package observe

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCountedBelow: once CountBelow names a directory, reads of the files
// below it, at any depth, are counted, not reported, and TakeCounted
// hands the count over; what the count must not stand for is still
// reported one by one: a write, a file with a second name (hard link), a
// file in another directory, and a file renamed out of the directory.
func TestCountedBelow(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir, other := t.TempDir(), t.TempDir()
	for _, f := range []string{"a", "b", "c", "d", "w", "h", "m", "sub/e", "sub/deep/g"} {
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
	if ok, err := s.w.CountBelow(first, other); ok || err != nil {
		t.Fatalf("CountBelow of a directory the read is not in: %v %v", ok, err)
	}
	if ok, err := s.w.CountBelow(first, dir); !ok || err != nil {
		t.Fatalf("CountBelow: %v %v", ok, err)
	}
	run(": < a; : < b; : < c; : < b; : < h; : >> w; : < sub/e; : < sub/deep/g; : < " + filepath.Join(other, "o") +
		"; /bin/mv m " + other + "/m; : < " + other + "/m; : < d")
	if err := o.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	counted, ok, err := s.w.TakeCounted()
	if err != nil || !ok {
		t.Fatalf("TakeCounted: %v %v", ok, err)
	}
	s.drain(t)
	reported := map[string]int{}
	for _, r := range s.got {
		if r.Kind == KindEvent && r.Event.Syscall == "openat" {
			reported[r.Event.Triple.Path]++
		}
	}
	for _, f := range []string{"b", "c", "d", "sub/e", "sub/deep/g"} {
		if n := reported[filepath.Join(dir, f)]; n != 0 {
			t.Errorf("%s: reported %d times, want counted", f, n)
		}
	}
	// a: the first read, reported; the second counted as its repeat
	// (Repeats), not below the directory.
	if n := reported[a]; n != 1 {
		t.Errorf("a: reported %d times, want 1", n)
	}
	for _, p := range []string{filepath.Join(dir, "h"), filepath.Join(dir, "w"), filepath.Join(other, "o"), filepath.Join(other, "m")} {
		if reported[p] == 0 {
			t.Errorf("%s: not reported; got:\n%s", p, describe(s.got))
		}
	}
	// 7 when a rename anywhere on the host (the global rename generation)
	// came between a's two reads: its second is then no repeat of the
	// first, and is counted below the directory instead.
	if counted.Dir != dir || counted.N != 6 && counted.N != 7 || counted.Rec.Event.Triple.Path != a || counted.First.IsZero() {
		t.Errorf("counted %+v, want 6 reads (b, c, b, sub/e, sub/deep/g, d) below %s under the read of a (7 with a's second)", counted, dir)
	}
	// Taken: the kernel counts no more, and Unwatch left nothing.
	var v subtree
	if err := o.objs.Subtree.Lookup(s.g.ID, &v); err == nil {
		t.Fatalf("counted reads of cgroup %d outlived TakeCounted and Unwatch: %+v", s.g.ID, v)
	}
}
