//go:build linux

package snapshot

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

func region(t *testing.T, pattern, why string) Region {
	t.Helper()
	p, err := policy.ParsePathPattern(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return Region{Pattern: p, Why: why}
}

// TestRestoreLeavesRegions: with Leave, what another holder's lease covers
// is left exactly as it is found (its edits, its new files and
// directories, its deletions, a directory's times), reported Left with
// the region's reason when it differs from the backup, while everything
// else (the agent's) is put back byte for byte. A new directory that holds
// a region below it stays, and the agent's new files in it go. A resumed
// restore keeps the regions; All drops them.
func TestRestoreLeavesRegions(t *testing.T) {
	f := newFixture(t)
	W := f.W
	s := f.take(t, "leave")
	const whyB, whySub, whyOut, whyEmpty = "session B holds MUTATES FILE:b.txt", "session B holds PROVIDES FILE:sub/**", "session C holds PROVIDES FILE:newdir/out/**", "session C holds PROVIDES FILE:emptydir/*"
	regions := []Region{
		region(t, W+"/src/b.txt", whyB),
		region(t, W+"/src/sub/**", whySub),
		region(t, W+"/src/newdir/out/**", whyOut),
		region(t, W+"/src/emptydir/*", whyEmpty),
	}

	// The agent's work: an edit, a new file, a deletion, a new directory
	// next to another session's output.
	write(t, W+"/src/a.txt", []byte("agent edit\n"), 0o644)
	write(t, W+"/src/mine.txt", []byte("agent\n"), 0o644)
	must(t, os.Remove(W+"/src/exec.sh"))
	write(t, W+"/src/newdir/mine.o", []byte("agent object\n"), 0o644)
	// The other sessions' work, in their regions.
	write(t, W+"/src/b.txt", []byte("their edit\n"), 0o640)
	write(t, W+"/src/sub/theirs.txt", []byte("theirs\n"), 0o644)
	must(t, os.Remove(W+"/src/sub/c.txt"))
	write(t, W+"/src/sub/newer/deep.txt", []byte("deep\n"), 0o644)
	write(t, W+"/src/newdir/out/result", []byte("result\n"), 0o644)
	write(t, W+"/src/emptydir/n", []byte("n\n"), 0o644)
	var subBefore unix.Stat_t
	must(t, unix.Lstat(W+"/src/sub", &subBefore))

	changed, err := s.ChangedSince(time.Now().Add(-time.Hour), Leave(regions...))
	must(t, err)
	for _, p := range changed {
		if _, isLeft := (&limit{leave: regions}).left(p); isLeft {
			t.Errorf("ChangedSince with Leave lists %s, which a restore leaves", p)
		}
	}

	// Interrupted once, then resumed with no option: the regions hold.
	ctx, cancel := context.WithCancel(context.Background())
	testHook = func(op, p string) { cancel() }
	_, err = s.Restore(ctx, Leave(regions...))
	testHook = nil
	if err == nil {
		t.Fatal("the interrupted restore finished")
	}
	rep, err := s.Restore(context.Background())
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	for p, want := range map[string]string{
		"/src/a.txt":              "alpha\n",
		"/src/exec.sh":            "#!/bin/sh\necho hi\n",
		"/src/b.txt":              "their edit\n",
		"/src/sub/theirs.txt":     "theirs\n",
		"/src/sub/newer/deep.txt": "deep\n",
		"/src/newdir/out/result":  "result\n",
		"/src/emptydir/n":         "n\n",
	} {
		if got, err := os.ReadFile(W + p); err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"/src/mine.txt", "/src/newdir/mine.o", "/src/sub/c.txt"} {
		if _, err := os.Lstat(W + p); !os.IsNotExist(err) {
			t.Errorf("%s exists (%v)", p, err)
		}
	}
	var sub unix.Stat_t
	must(t, unix.Lstat(W+"/src/sub", &sub))
	if sub.Mtim != subBefore.Mtim || sub.Ctim != subBefore.Ctim {
		t.Errorf("the left directory src/sub was touched: mtime %v ctime %v, was %v %v", sub.Mtim, sub.Ctim, subBefore.Mtim, subBefore.Ctim)
	}
	if !rep.Resumed {
		t.Error("not resumed")
	}
	wantLeft := map[string]string{
		W + "/src/b.txt": whyB, W + "/src/sub": whySub, W + "/src/sub/theirs.txt": whySub, W + "/src/sub/c.txt": whySub,
		W + "/src/sub/newer": whySub, W + "/src/newdir": whyOut, W + "/src/newdir/out": whyOut, W + "/src/emptydir/n": whyEmpty,
	}
	gotLeft := map[string]string{}
	for _, e := range rep.Entries {
		if e.Action == Left {
			gotLeft[e.Path] = e.Why
		}
	}
	for p, why := range wantLeft {
		if gotLeft[p] != why {
			t.Errorf("report: %s left %q, want %q", p, gotLeft[p], why)
		}
	}
	for p := range gotLeft {
		if _, ok := wantLeft[p]; !ok {
			t.Errorf("report: %s left, which nobody changed in a region (or is the agent's)", p)
		}
	}
	if i := slices.IndexFunc(rep.Entries, func(e ReportEntry) bool { return e.Path == W+"/src/a.txt" }); i < 0 || rep.Entries[i].Action != Restored {
		t.Errorf("a.txt not reported restored: %+v", rep.Entries)
	}

	// All keeps the regions given to it (it widens what is restored, not
	// into another session's work), and drops those of a resumed restore:
	// everything goes back.
	if _, err := s.Restore(context.Background(), All(), Leave(regions[0])); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(W + "/src/b.txt"); string(got) != "their edit\n" {
		t.Errorf("All with Leave restored b.txt: %q", got)
	}
	if _, err := s.Restore(context.Background(), All()); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(W + "/src/b.txt"); string(got) != "bravo bravo\n" {
		t.Errorf("All left b.txt %q", got)
	}
	if _, err := os.Lstat(W + "/src/newdir"); !os.IsNotExist(err) {
		t.Errorf("All kept newdir (%v)", err)
	}
}

// TestRegionJSON: the journal keeps a region as its pattern text.
func TestRegionJSON(t *testing.T) {
	for _, p := range []string{"/w/a", "/w/b/*", "/w/c/**", "/"} {
		r := region(t, p, "why "+p)
		b, err := json.Marshal(r)
		must(t, err)
		var back Region
		must(t, json.Unmarshal(b, &back))
		if back != r {
			t.Errorf("%s: %s read back as %+v", p, b, back)
		}
	}
	var bad Region
	if err := json.Unmarshal([]byte(`{"pattern":"relative"}`), &bad); err == nil {
		t.Error("a relative pattern was read")
	}
}

func TestHoldsLeft(t *testing.T) {
	l := &limit{}
	Leave(region(t, "/w/a/b/**", ""), region(t, "/w/c/*", ""), region(t, "/w/x", ""))(l)
	for _, c := range []struct {
		p    string
		want bool
	}{{"/w", true}, {"/w/a", true}, {"/w/a/b", false}, {"/w/c", true}, {"/w/c/d", false}, {"/w/xx", false}, {"/", true}} {
		if _, got := l.holdsLeft(c.p); got != c.want {
			t.Errorf("holdsLeft(%s) = %v", c.p, got)
		}
	}
}
