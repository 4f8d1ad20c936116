package decide

import (
	"testing"

	"github.com/klocklabs/klock/policy"
)

// TestCountedReads: a read allowed by an intent that allows every name in
// its directory makes the directory countable; the counts go to that
// intent's uses and to the events, and are listed by directory. A
// directory with a rule below it, a read another rule allows more
// narrowly, a write and a refused read are not countable.
func TestCountedReads(t *testing.T) {
	m := manifest(t, "strict", "none",
		"CONSUMES FILE:/srv/repo/**",
		"MUTATES FILE:/srv/repo/src/**",
		"CONSUMES FILE:/srv/repo/docs/secret.md",
	)
	e := New(compile(t, m), policy.ModeStrict, WithClock(fakeClock()))
	read := func(p string) (Verdict, string, bool) {
		ev := fileEv(policy.Consumes, p, "openat")
		v := e.Observe(ev)
		dir, ok := e.CountFrom(ev, v)
		return v, dir, ok
	}
	if _, dir, ok := read("/srv/repo/src/a.go"); !ok || dir != "/srv/repo/src" {
		t.Fatalf("read in /srv/repo/src: countable %v (%q), want true", ok, dir)
	}
	e.Counted("/srv/repo/src", 41)
	e.Counted("/srv/repo/elsewhere", 7) // never named: ignored
	for _, p := range []string{"/srv/repo/docs/x.md", "/srv/repo/README.md", "/etc/passwd"} {
		if _, dir, ok := read(p); ok {
			t.Errorf("read of %s: countable in %s, want not", p, dir)
		}
	}
	w := fileEv(policy.Mutates, "/srv/repo/src/b.go", "openat")
	if _, ok := e.CountFrom(w, e.Observe(w)); ok {
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
