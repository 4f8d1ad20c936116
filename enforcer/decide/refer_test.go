package decide

import (
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

func linkEv(src, dst string) event.Event {
	return event.Event{Source: event.SourceTracepoint, Triple: policy.FileTriple(policy.Provides, dst),
		Extra: policy.FileTriple(policy.Consumes, src), PID: 42, Comm: "ln", Syscall: "linkat"}
}

// widenedManifest is the layout Landlock walls at the workdir (out/ may be
// removed and made again): the wall lets any name under /srv/repo be
// linked anywhere under it, so only the engine sees the aliasing.
func widenedEngine(t *testing.T, mode string) *Engine {
	m := manifest(t, mode, "none",
		"CONSUMES FILE:/srv/repo/**",
		"PROVIDES FILE:/srv/repo/out/**", "MUTATES FILE:/srv/repo/out/**", "DELETES FILE:/srv/repo/out/**",
		"RENAMES FILE:/srv/repo/out/**", "RENAMES FILE:/srv/repo/mv/**",
		"PROVIDES PROC:/srv/repo/bin/**", "PROVIDES FILE:/srv/repo/bin/**", "PROVIDES FILE:/srv/repo/drop/**")
	return New(compile(t, m), m.Mode, WithClock(fakeClock()))
}

// TestHardLinkCannotWidenAnInode: a hard link whose new name carries a
// content right (MUTATES, running it) that the file's existing name lacks
// is a violation on that existing name, saying which link; one that gives
// nothing new, or of a file the session made, is not.
func TestHardLinkCannotWidenAnInode(t *testing.T) {
	cases := []struct {
		name      string
		ev        func(e *Engine) event.Event
		violation string // the violating triple, "" for none
		via       string
	}{
		{name: "CONSUMES-only file linked into a MUTATES scope",
			ev:        func(*Engine) event.Event { return linkEv("/srv/repo/secret", "/srv/repo/out/s") },
			violation: "MUTATES FILE:/srv/repo/secret", via: "through the hard link /srv/repo/out/s"},
		{name: "a file linked within its own scope",
			ev: func(*Engine) event.Event { return linkEv("/srv/repo/out/a", "/srv/repo/out/b") }},
		{name: "a writable file linked where it may only be made",
			ev: func(*Engine) event.Event { return linkEv("/srv/repo/out/a", "/srv/repo/drop/a") }},
		{name: "a file the session made, linked into an exec scope",
			ev: func(e *Engine) event.Event {
				e.Observe(fileEv(policy.Provides, "/srv/repo/out/tool", "openat"))
				return linkEv("/srv/repo/out/tool", "/srv/repo/bin/tool")
			}},
		{name: "a pre-session file linked into an exec scope",
			ev:        func(*Engine) event.Event { return linkEv("/srv/repo/secret", "/srv/repo/bin/tool") },
			violation: "PROVIDES PROC:/srv/repo/secret", via: "through the hard link /srv/repo/bin/tool"},
		{name: "a CONSUMES-only file renamed into a MUTATES scope",
			ev:        func(*Engine) event.Event { return renameEv("/srv/repo/mv/f", "/srv/repo/out/f", false) },
			violation: "MUTATES FILE:/srv/repo/mv/f", via: "renamed to /srv/repo/out/f"},
		{name: "a writable file renamed within its scope",
			ev: func(*Engine) event.Event { return renameEv("/srv/repo/out/a", "/srv/repo/out/b", true) }},
		{name: "a link the kernel refused with EXDEV (Landlock's REFER answer) did nothing",
			ev: func(*Engine) event.Event {
				ev := linkEv("/srv/repo/secret", "/srv/repo/out/s")
				ev.Errno = 18
				return ev
			}},
		{name: "a link a wall refused is still the attempt",
			ev:        func(*Engine) event.Event { return blocked(linkEv("/srv/repo/secret", "/srv/repo/out/s")) },
			violation: "MUTATES FILE:/srv/repo/secret", via: "through the hard link /srv/repo/out/s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := widenedEngine(t, "strict")
			v := e.Observe(c.ev(e))
			if c.violation == "" {
				if v.Violation() {
					t.Fatalf("violation %v, want none", v.Err)
				}
				if r := e.Records(); len(r.Violations) != 0 {
					t.Fatalf("recorded %+v", r.Violations)
				}
				return
			}
			if !v.Violation() || v.Action != ActionKill || v.Triple.String() != c.violation {
				t.Fatalf("verdict %+v, want a kill for %s", v, c.violation)
			}
			if !strings.Contains(v.Err.Error(), "("+c.via+")") {
				t.Fatalf("error %q does not say %q", v.Err, c.via)
			}
			r := e.Records()
			if len(r.Violations) != 1 || r.Violations[0].Via != c.via {
				t.Fatalf("violations %+v", r.Violations)
			}
		})
	}
}

// TestHardLinkAmendsTheInodeInPermissive: permissive mode amends the
// existing name with the right the link would give, so --learn writes
// what the run needed and the write through the link goes on.
func TestHardLinkAmendsTheInodeInPermissive(t *testing.T) {
	e := widenedEngine(t, "permissive")
	v := e.Observe(linkEv("/srv/repo/secret", "/srv/repo/out/s"))
	if v.Action != ActionAmended || v.Lease == nil || v.Lease.String() != "MUTATES FILE:/srv/repo/secret" {
		t.Fatalf("verdict %+v", v)
	}
	if v := e.Observe(linkEv("/srv/repo/secret", "/srv/repo/out/s2")); v.Violation() {
		t.Fatalf("second link after the amendment: %v", v.Err)
	}
}

// TestWriteThroughAPreSessionHardLink: out/s and secret were one inode
// before the session (a link planted earlier): writing out/s, which the
// manifest allows, writes secret, which it does not. A file the session
// made anew at out/s is another inode; a name with no other is judged
// alone.
func TestWriteThroughAPreSessionHardLink(t *testing.T) {
	names := map[string][]string{"/srv/repo/out/s": {"/srv/repo/secret"}, "/srv/repo/out/both": {"/srv/repo/out/other"}}
	m := manifest(t, "strict", "none", "CONSUMES FILE:/srv/repo/**", "PROVIDES FILE:/srv/repo/out/**", "MUTATES FILE:/srv/repo/out/**", "DELETES FILE:/srv/repo/out/**")
	newEngine := func() *Engine {
		return New(compile(t, m), m.Mode, WithClock(fakeClock()), WithOtherNames(func(p string) []string { return names[p] }))
	}
	e := newEngine()
	v := e.Observe(fileEv(policy.Mutates, "/srv/repo/out/s", "openat"))
	if !v.Violation() || v.Triple.String() != "MUTATES FILE:/srv/repo/secret" || !strings.Contains(v.Err.Error(), "(through the hard link /srv/repo/out/s)") {
		t.Fatalf("write through the planted link: %+v", v)
	}
	e = newEngine()
	if v := e.Observe(fileEv(policy.Mutates, "/srv/repo/out/both", "openat")); v.Violation() {
		t.Fatalf("both names writable: %v", v.Err)
	}
	e = newEngine()
	e.Observe(fileEv(policy.Deletes, "/srv/repo/out/s", "unlinkat"))
	e.Observe(fileEv(policy.Provides, "/srv/repo/out/s", "openat"))
	if v := e.Observe(fileEv(policy.Mutates, "/srv/repo/out/s", "openat")); v.Violation() {
		t.Fatalf("a file made anew at the name: %v", v.Err)
	}
}

// TestReferredChangesNothing: a link's judgement of the rights its new
// name gives is recorded on the existing name as Referred (it changed
// nothing there), and the new name is an alias of it, through a second
// link too; a write of the existing name itself is no judgement.
func TestReferredChangesNothing(t *testing.T) {
	e := widenedEngine(t, "strict")
	e.Observe(linkEv("/srv/repo/secret", "/srv/repo/out/s"))
	e.Observe(linkEv("/srv/repo/out/s", "/srv/repo/out/t"))
	refused := linkEv("/srv/repo/other", "/srv/repo/out/o")
	refused.Errno, refused.Blocked = 13, true
	e.Observe(refused)
	r := e.Records()
	o := observed(t, r, "MUTATES FILE:/srv/repo/secret")
	if !o.Referred || o.Failed != 0 {
		t.Errorf("the link's judgement: %+v, want Referred, not failed", o)
	}
	if got := r.Aliases["/srv/repo/out/s"]; len(got) != 1 || got[0] != "/srv/repo/secret" {
		t.Errorf("aliases of out/s = %v, want [/srv/repo/secret]", got)
	}
	if got := r.Aliases["/srv/repo/out/t"]; len(got) != 1 || got[0] != "/srv/repo/out/s" {
		t.Errorf("aliases of out/t = %v, want [/srv/repo/out/s]", got)
	}
	if _, ok := r.Aliases["/srv/repo/out/o"]; ok {
		t.Errorf("a link the wall refused made an alias: %v", r.Aliases)
	}
	e.Observe(fileEv(policy.Mutates, "/srv/repo/secret", "openat"))
	if o := observed(t, e.Records(), "MUTATES FILE:/srv/repo/secret"); o.Referred {
		t.Errorf("after a write of the name itself: %+v, want not Referred", o)
	}
}

func observed(t *testing.T, r Records, triple string) Observation {
	t.Helper()
	for _, o := range r.Observed {
		if o.Triple.String() == triple {
			return o
		}
	}
	t.Fatalf("%s not observed: %+v", triple, r.Observed)
	return Observation{}
}

// TestWriteThroughHiddenNames: a write of the content of a file that had a
// name the backup did not find is a MUTATES of the file system that name
// lies on, saying through which file; its times (git's freshening), a
// failed write, a file with no hidden name, and a manifest that declares
// that whole file system are not violations.
func TestWriteThroughHiddenNames(t *testing.T) {
	hidden := func(p string) (int, string) {
		if p == "/srv/repo/out/planted" {
			return 1, "/srv"
		}
		return 0, ""
	}
	e := New(compile(t, manifest(t, "strict", "none", "MUTATES FILE:/srv/repo/out/**")), policy.ModeStrict,
		WithClock(fakeClock()), WithHiddenNames(hidden))
	for _, ev := range []event.Event{
		fileEv(policy.Mutates, "/srv/repo/out/planted", "utimensat"),
		fileEv(policy.Mutates, "/srv/repo/out/other", "openat"),
		func() event.Event {
			ev := fileEv(policy.Mutates, "/srv/repo/out/planted", "openat")
			ev.Errno = 2
			return ev
		}(),
	} {
		if v := e.Observe(ev); v.Violation() {
			t.Errorf("%s by %s: %+v, want allowed", ev.Triple, ev.Syscall, v)
		}
	}
	v := e.Observe(fileEv(policy.Mutates, "/srv/repo/out/planted", "openat"))
	if !v.Violation() || v.Triple.String() != "MUTATES FILE:/srv" || !strings.Contains(v.Err.Error(), "through /srv/repo/out/planted, which had 1 more name") {
		t.Errorf("a write through it: %+v (%v), want a violation of MUTATES FILE:/srv through it", v, v.Err)
	}
	wide := New(compile(t, manifest(t, "strict", "none", "MUTATES FILE:/srv/**")), policy.ModeStrict,
		WithClock(fakeClock()), WithHiddenNames(hidden))
	if v := wide.Observe(fileEv(policy.Mutates, "/srv/repo/out/planted", "openat")); v.Violation() {
		t.Errorf("with MUTATES FILE:/srv/** declared: %+v, want allowed", v)
	}
}

// TestLearnSkipsHiddenNames: --learn does not declare the file system a
// written file's hidden names lie on; it lists the write, unlearned.
func TestLearnSkipsHiddenNames(t *testing.T) {
	m := manifest(t, "permissive", "none", "MUTATES FILE:/srv/repo/out/**")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()),
		WithHiddenNames(func(p string) (int, string) { return 1, "/srv" }))
	e.Observe(fileEv(policy.Mutates, "/srv/repo/out/planted", "openat"))
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "- MUTATES FILE:/srv\n") || !strings.Contains(string(out), "#   MUTATES FILE:/srv (a write through a file with a hard link") {
		t.Errorf("learned:\n%s", out)
	}
}
