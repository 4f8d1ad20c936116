package decide

import (
	"testing"

	"github.com/klocklabs/klock/policy"
)

// TestCountedReads: a read allowed by an intent that allows every path
// below a directory makes the directory countable; the counts go to that
// intent's uses and to the events, and are listed by directory. A
// directory with a rule below it, a read outside the directory, a read
// another rule allows more narrowly and a write are not countable.
func TestCountedReads(t *testing.T) {
	m := manifest(t, "strict", "none",
		"CONSUMES FILE:/srv/repo/**",
		"MUTATES FILE:/srv/repo/src/**",
		"CONSUMES FILE:/srv/repo/docs/secret.md",
	)
	e := New(compile(t, m), policy.ModeStrict, WithClock(fakeClock()))
	read := func(p, dir string) bool {
		ev := fileEv(policy.Consumes, p, "openat")
		return e.CountFrom(ev, e.Observe(ev), dir)
	}
	if !read("/srv/repo/src/pkg/a.go", "/srv/repo/src") {
		t.Fatal("read below /srv/repo/src: not countable, want countable")
	}
	e.Counted("/srv/repo/src", 41)
	e.Counted("/srv/repo/elsewhere", 7) // never named: ignored
	for _, c := range [][2]string{{"/srv/repo/docs/x.md", "/srv/repo/docs"}, {"/srv/repo/README.md", "/srv/repo"}, {"/etc/passwd", "/srv/repo/src"}} {
		if read(c[0], c[1]) {
			t.Errorf("read of %s: countable below %s, want not", c[0], c[1])
		}
	}
	w := fileEv(policy.Mutates, "/srv/repo/src/b.go", "openat")
	if e.CountFrom(w, e.Observe(w), "/srv/repo/src") {
		t.Error("a write made its directory countable")
	}
	r := e.Records()
	if len(r.Counted) != 1 || r.Counted[0].Dir != "/srv/repo/src" || r.Counted[0].Count != 41 {
		t.Fatalf("counted %+v, want 41 reads in /srv/repo/src", r.Counted)
	}
	if in := r.Intents[r.Counted[0].Intent].String(); in != "CONSUMES FILE:/srv/repo/**" {
		t.Errorf("counted under %s", in)
	}
	if r.Uses[0] != 1+41+2 { // a.go, the 41 counted, docs/x.md, README.md
		t.Errorf("uses of CONSUMES /srv/repo/**: %d, want 44", r.Uses[0])
	}
	if r.Events != 5+41 {
		t.Errorf("events %d, want 46", r.Events)
	}
}

// TestCountFromAsksAgainAfterAnAmendment: the answer for reads below a
// directory is kept while the ruleset stands and asked again when it
// changes: a permissive amendment elsewhere leaves the reads there
// countable under the new ruleset, one that names a path below the
// directory ends counting there.
func TestCountFromAsksAgainAfterAnAmendment(t *testing.T) {
	e := New(compile(t, manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")), policy.ModePermissive, WithClock(fakeClock()))
	read := func(p string) bool {
		ev := fileEv(policy.Consumes, p, "openat")
		return e.CountFrom(ev, e.Observe(ev), "/srv/repo/src")
	}
	amend := func(p string) {
		w := fileEv(policy.Mutates, p, "openat")
		if v := e.Observe(w); v.Action == ActionAllow && v.Intent != nil {
			t.Fatalf("the undeclared write of %s was allowed by %s: the test needs an amendment", p, v.Intent)
		}
	}
	if !read("/srv/repo/src/a.go") {
		t.Fatal("read below /srv/repo/src: not countable, want countable")
	}
	amend("/srv/elsewhere/x")
	if !read("/srv/repo/src/b.go") {
		t.Error("reads below /srv/repo/src not countable after an amendment elsewhere")
	}
	amend("/srv/repo/src/b.go")
	if read("/srv/repo/src/c.go") {
		t.Error("reads below /srv/repo/src still countable after an amendment named a path there")
	}
}
