package decide

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// naiveCreated is the set as a plain map, every tree operation a scan of
// it: the reference the indexed createdSet must agree with.
type naiveCreated map[string]bool

func (n naiveCreated) take(path string) []string {
	var out []string
	for p := range n {
		if p == path || strings.HasPrefix(p, strings.TrimSuffix(path, "/")+"/") {
			out = append(out, p[len(path):])
			delete(n, p)
		}
	}
	return out
}

func (n naiveCreated) update(ev event.Event) {
	t := ev.Triple
	switch t.Predicate {
	case policy.Provides:
		if IsCreation(ev.Syscall) {
			n[t.Path] = true
		} else {
			delete(n, t.Path)
		}
	case policy.Deletes:
		delete(n, t.Path)
	case policy.Renames:
		moved := n.take(t.Path)
		n.take(ev.Extra.Path)
		for _, rel := range moved {
			n[ev.Extra.Path+rel] = true
		}
	}
}

// TestCreatedSetAgreesWithAScan: creates, links, removals and renames of
// files and directories (into, out of and over each other), at random:
// the indexed set holds exactly what a scan of every path would.
func TestCreatedSetAgreesWithAScan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	names := func() string {
		depth := 1 + r.IntN(3)
		var b strings.Builder
		b.WriteString("/w")
		for range depth {
			fmt.Fprintf(&b, "/%c", 'a'+r.IntN(4))
		}
		return b.String()
	}
	for round := range 200 {
		got, want := newCreatedSet(), naiveCreated{}
		for range 60 {
			var ev event.Event
			switch r.IntN(5) {
			case 0, 1:
				ev = event.Event{Triple: policy.FileTriple(policy.Provides, names()), Syscall: "openat"}
			case 2:
				ev = event.Event{Triple: policy.FileTriple(policy.Provides, names()), Syscall: "linkat"}
			case 3:
				ev = event.Event{Triple: policy.FileTriple(policy.Deletes, names()), Syscall: "unlinkat"}
			case 4:
				ev = event.Event{Triple: policy.FileTriple(policy.Renames, names()), Extra: policy.FileTriple(policy.Mutates, names()), Syscall: "renameat"}
			}
			if ev.Triple.Predicate == policy.Renames && (ev.Triple.Path == ev.Extra.Path || strings.HasPrefix(ev.Extra.Path, ev.Triple.Path+"/")) {
				continue // the kernel refuses a rename into itself
			}
			got.update(ev)
			want.update(ev)
			var w []string
			for p := range want {
				w = append(w, p)
			}
			g := got.all()
			slices.Sort(g)
			slices.Sort(w)
			if !slices.Equal(g, w) {
				t.Fatalf("round %d after %s → %s: indexed %v, scan %v", round, ev.Triple, ev.Extra, g, w)
			}
		}
	}
}

// BenchmarkCreatedRenames: n files made in a directory, each renamed into
// place (a build, an unpacker); the cost per file must not grow with n.
func BenchmarkCreatedRenames(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				s := newCreatedSet()
				for i := range n {
					tmp, dst := fmt.Sprintf("/w/out/.tmp%d", i), fmt.Sprintf("/w/out/f%d", i)
					s.update(event.Event{Triple: policy.FileTriple(policy.Provides, tmp), Syscall: "openat"})
					s.update(event.Event{Triple: policy.FileTriple(policy.Renames, tmp), Extra: policy.FileTriple(policy.Mutates, dst), Syscall: "renameat"})
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/file")
		})
	}
}

// TestTmpfileDoesNotMakeItsDirectoryTheSessions: an O_TMPFILE open names
// the directory the unnamed file went in (PROVIDES of it). The directory
// is not the session's creation: a chmod of it afterwards is judged
// against the manifest, and --learn declares the directory's subtree
// (which covers it), never PROVIDES, MUTATES or DELETES of the directory
// alone, rights on its parent (Python's tempfile.TemporaryFile in /tmp
// made a learned manifest that Landlock could only wall at /).
func TestTmpfileDoesNotMakeItsDirectoryTheSessions(t *testing.T) {
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	e := New(compile(t, m), m.Mode, WithClock(fakeClock()))
	ev := fileEv(policy.Provides, "/tmp", "openat")
	ev.Tmpfile = true
	e.Observe(ev)
	if e.Created("/tmp") {
		t.Fatal("/tmp became the session's own through an O_TMPFILE open")
	}
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The session's /tmp is private (the default): ${tmpdir}.
	if !strings.Contains(string(out), "PROVIDES FILE:${tmpdir}/**") {
		t.Errorf("learned:\n%s\nwant PROVIDES FILE:${tmpdir}/**", out)
	}
	for _, bad := range []string{"PROVIDES FILE:/tmp #", "MUTATES FILE:/tmp #", "DELETES FILE:/tmp #", "FILE:${tmpdir} #"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("learned %q:\n%s", bad, out)
		}
	}
	s := New(compile(t, manifest(t, "strict", "none", "PROVIDES FILE:/srv/repo/d/**")), policy.ModeStrict, WithClock(fakeClock()))
	ev = fileEv(policy.Provides, "/srv/repo/d", "openat")
	ev.Tmpfile = true
	s.Observe(ev)
	if v := s.Observe(fileEv(policy.Mutates, "/srv/repo/d", "fchmodat")); !v.Violation() {
		t.Error("a chmod of the directory an unnamed file was made in was allowed as the session's own")
	}
}

// TestTmpfileInADirectoryTheRunMade: a directory the run made and then
// made an unnamed file in is still the run's own (its mkdir and the
// O_TMPFILE open are one observation).
func TestTmpfileInADirectoryTheRunMade(t *testing.T) {
	m := manifest(t, "strict", "none", "PROVIDES FILE:/srv/repo/**")
	e := New(compile(t, m), m.Mode, WithClock(fakeClock()))
	e.Observe(fileEv(policy.Provides, "/srv/repo/d", "mkdirat"))
	ev := fileEv(policy.Provides, "/srv/repo/d", "openat")
	ev.Tmpfile = true
	e.Observe(ev)
	if !e.Created("/srv/repo/d") {
		t.Fatal("the directory the run made is no longer its own")
	}
	e.mu.Lock()
	own := e.ownFiles()
	e.mu.Unlock()
	if !own["/srv/repo/d"] {
		t.Errorf("ownFiles %v: the directory the run made is missing", own)
	}
}
