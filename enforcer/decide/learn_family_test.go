package decide

import (
	"fmt"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// manifestTmp is manifest with a tmp field (private or host).
func manifestTmp(t testing.TB, tmp string, intents ...string) *policy.Manifest {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: klock/v1\nagent: {id: test-agent}\nmode: permissive\nworkdir: /srv/repo\nbaseline: none\ntmp: %s\nintents:\n", tmp)
	for _, in := range intents {
		fmt.Fprintf(&b, "  - %q\n", in)
	}
	if len(intents) == 0 {
		b.WriteString("  []\n")
	}
	b.WriteString(costEnvelope)
	m, err := policy.Parse("test.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("parse manifest: %v\n%s", err, b.String())
	}
	return m
}

// learnCase is one learning run and what the strict runs under its
// manifest must allow and refuse.
type learnCase struct {
	name string
	m    *policy.Manifest
	// learn is the learning run; next, a later run of the same task the
	// learned manifest must allow in strict mode; refused, operations it
	// must still refuse (out of scope).
	learn, next, refused []event.Event
	// want and unwanted are substrings of the learned manifest.
	want, unwanted []string
}

func (c learnCase) run(t *testing.T) string {
	t.Helper()
	out := string(learnFrom(t, c.m, nil, c.learn...))
	for _, w := range c.want {
		if !strings.Contains(out, w) {
			t.Errorf("learned manifest lacks %q", w)
		}
	}
	for _, u := range c.unwanted {
		if strings.Contains(out, u) {
			t.Errorf("learned manifest has %q", u)
		}
	}
	lm, err := policy.Parse("learned.yaml", []byte(out))
	if err != nil {
		t.Fatalf("the learned manifest does not parse: %v\n%s", err, out)
	}
	strict := New(compile(t, lm), policy.ModeStrict, WithClock(fakeClock()))
	for _, ev := range c.next {
		if v := strict.Observe(ev); v.Action != ActionAllow {
			t.Errorf("the next run: %s → %v (%v)", ev.Triple, v.Action, v.Err)
		}
	}
	for _, ev := range c.refused {
		strict := New(compile(t, lm), policy.ModeStrict, WithClock(fakeClock()))
		if v := strict.Observe(ev); v.Action != ActionKill {
			t.Errorf("out of scope: %s → %v, want a kill", ev.Triple, v.Action)
		}
	}
	if t.Failed() {
		t.Logf("learned manifest:\n%s", out)
	}
	return out
}

// sqliteWAL is a WAL-mode connection's life as the learning run of a
// Codex CLI session showed it: the database written, its -wal and -shm
// made, written and removed when the connection closed.
func sqliteWAL(db string) []event.Event {
	return []event.Event{
		fileEv(policy.Mutates, db, "openat"),
		fileEv(policy.Provides, db+"-wal", "openat"), fileEv(policy.Provides, db+"-shm", "openat"),
		fileEv(policy.Mutates, db+"-wal", "write"), fileEv(policy.Mutates, db+"-shm", "write"),
		fileEv(policy.Deletes, db+"-wal", "unlinkat"), fileEv(policy.Deletes, db+"-shm", "unlinkat"),
	}
}

// leftWAL is the next run after a killed one left the WAL and its index:
// opened (written), checkpointed and removed.
func leftWAL(db string) []event.Event {
	return []event.Event{
		fileEv(policy.Mutates, db, "openat"),
		fileEv(policy.Mutates, db+"-wal", "openat"), fileEv(policy.Mutates, db+"-shm", "openat"),
		fileEv(policy.Deletes, db+"-wal", "unlinkat"), fileEv(policy.Deletes, db+"-shm", "unlinkat"),
		fileEv(policy.Provides, db+"-journal", "openat"), fileEv(policy.Deletes, db+"-journal", "unlinkat"),
	}
}

// TestLearnedFileFamilies: what a tool makes and rotates beside a file is
// learned as the operations its family needs, so that a later run that
// finds what an earlier one left (a WAL, a lock, a stale temporary) is
// CLEAN; out-of-scope operations beside them are still refused.
func TestLearnedFileFamilies(t *testing.T) {
	none := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	cases := []learnCase{{
		name:  "SQLite WAL in a tool's home state (Codex CLI)",
		m:     none,
		learn: sqliteWAL("/home/dev/.codex/state.sqlite"),
		next:  leftWAL("/home/dev/.codex/state.sqlite"),
		refused: []event.Event{
			fileEv(policy.Mutates, "/home/dev/.codex/config.toml", "openat"),
			fileEv(policy.Deletes, "/home/dev/.codex/auth.json", "unlinkat"),
			fileEv(policy.Mutates, "/home/dev/.bashrc", "openat"),
		},
		want:     []string{"MUTATES FILE:/home/dev/.codex/state.sqlite-wal # learned: SQLite's companions of state.sqlite"},
		unwanted: []string{"FILE:/home/dev/.codex/*", "FILE:/home/dev/.codex/**"},
	}, {
		name:  "SQLite WAL outside any home",
		m:     none,
		learn: sqliteWAL("/srv/state/app.db"),
		next:  leftWAL("/srv/state/app.db"),
		refused: []event.Event{
			fileEv(policy.Mutates, "/srv/state/other.db", "openat"),
			fileEv(policy.Provides, "/srv/state/new", "openat"),
		},
		want:     []string{"PROVIDES FILE:/srv/state/app.db-journal", "DELETES FILE:/srv/state/app.db-shm", "MUTATES FILE:/srv/state/app.db #"},
		unwanted: []string{"FILE:/srv/state/*", "FILE:/srv/state/**"},
	}, {
		name:  "SQLite WAL found left, changed and removed: the next run makes it",
		m:     none,
		learn: leftWAL("/srv/state/app.db")[:5],
		next:  sqliteWAL("/srv/state/app.db"),
		refused: []event.Event{
			fileEv(policy.Provides, "/srv/state/app.db-wal2", "openat"),
			fileEv(policy.Deletes, "/srv/state/app.db", "unlinkat"),
		},
		want: []string{"PROVIDES FILE:/srv/state/app.db-wal #", "PROVIDES FILE:/srv/state/app.db-shm #"},
	}, {
		name: "SQLite rollback journal of a database the run made",
		m:    none,
		learn: []event.Event{
			fileEv(policy.Provides, "/srv/repo/db/t.sqlite", "openat"),
			fileEv(policy.Provides, "/srv/repo/db/t.sqlite-journal", "openat"), fileEv(policy.Deletes, "/srv/repo/db/t.sqlite-journal", "unlinkat"),
		},
		next: []event.Event{
			fileEv(policy.Mutates, "/srv/repo/db/t.sqlite", "openat"),
			fileEv(policy.Mutates, "/srv/repo/db/t.sqlite-journal", "openat"),
			fileEv(policy.Provides, "/srv/repo/db/t.sqlite-wal", "openat"),
		},
		refused: []event.Event{fileEv(policy.Mutates, "/srv/repo/db/other", "openat")},
	}, {
		name: "lock files made and removed",
		m:    none,
		learn: []event.Event{
			fileEv(policy.Provides, "/srv/data/app.lock", "openat"), fileEv(policy.Deletes, "/srv/data/app.lock", "unlinkat"),
			fileEv(policy.Provides, "/srv/data/.cache.lock", "openat"), fileEv(policy.Deletes, "/srv/data/.cache.lock", "unlinkat"),
			fileEv(policy.Provides, "/srv/data/index.lck", "openat"), fileEv(policy.Deletes, "/srv/data/index.lck", "unlinkat"),
		},
		next: []event.Event{
			fileEv(policy.Mutates, "/srv/data/app.lock", "openat"), fileEv(policy.Deletes, "/srv/data/app.lock", "unlinkat"),
			fileEv(policy.Mutates, "/srv/data/.cache.lock", "openat"), fileEv(policy.Mutates, "/srv/data/index.lck", "openat"),
		},
		refused: []event.Event{
			fileEv(policy.Mutates, "/srv/data/app.db", "openat"),
			fileEv(policy.Provides, "/srv/data/other.lock", "openat"),
		},
		want: []string{"MUTATES FILE:/srv/data/app.lock # learned: a lock file"},
	}, {
		name: "atomic write: X.tmp.<digits> renamed over X",
		m:    none,
		learn: []event.Event{
			fileEv(policy.Provides, "/srv/cfg/settings.json.tmp.12345", "openat"),
			renameEv("/srv/cfg/settings.json.tmp.12345", "/srv/cfg/settings.json", true),
		},
		next: []event.Event{
			fileEv(policy.Provides, "/srv/cfg/settings.json.tmp.67890", "openat"),
			renameEv("/srv/cfg/settings.json.tmp.67890", "/srv/cfg/settings.json", true),
		},
		refused: []event.Event{
			fileEv(policy.Mutates, "/srv/cfg/other.json", "openat"),
			fileEv(policy.Deletes, "/srv/cfg/settings.json", "unlinkat"),
		},
		want: []string{"PROVIDES FILE:/srv/cfg/* # learned: the temporary file of an atomic write of settings.json"},
	}, {
		name: "atomic write: .X.<random> renamed over X, and X.tmp",
		m:    none,
		learn: []event.Event{
			fileEv(policy.Provides, "/srv/cfg/.state.json.a8Kz3q", "openat"),
			renameEv("/srv/cfg/.state.json.a8Kz3q", "/srv/cfg/state.json", true),
			fileEv(policy.Provides, "/srv/cfg/app.ini.tmp", "openat"),
			renameEv("/srv/cfg/app.ini.tmp", "/srv/cfg/app.ini", false),
		},
		next: []event.Event{
			fileEv(policy.Provides, "/srv/cfg/.state.json.Zz81pQ", "openat"),
			renameEv("/srv/cfg/.state.json.Zz81pQ", "/srv/cfg/state.json", true),
			fileEv(policy.Mutates, "/srv/cfg/app.ini.tmp", "openat"),
			renameEv("/srv/cfg/app.ini.tmp", "/srv/cfg/app.ini", true),
		},
		refused: []event.Event{fileEv(policy.Mutates, "/srv/cfg/other.ini", "openat")},
		want:    []string{"MUTATES FILE:/srv/cfg/app.ini.tmp #", "DELETES FILE:/srv/cfg/app.ini.tmp #", "MUTATES FILE:/srv/cfg/app.ini #"},
	}, {
		name: "atomic write in a home directory itself stays exact",
		m:    none,
		learn: []event.Event{
			fileEv(policy.Provides, "/home/dev/.profile.tmp.99", "openat"),
			renameEv("/home/dev/.profile.tmp.99", "/home/dev/.profile", true),
		},
		refused:  []event.Event{fileEv(policy.Provides, "/home/dev/.bash_login", "openat")},
		unwanted: []string{"FILE:/home/dev/*", "FILE:/home/dev/**"},
	}, {
		name: "numbered temporary directories (pytest's basetemp outside /tmp)",
		m:    none,
		learn: []event.Event{
			fileEv(policy.Provides, "/srv/cache/pytest-of-dev/pytest-0", "mkdirat"),
			fileEv(policy.Provides, "/srv/cache/pytest-of-dev/pytest-0/test_a0", "mkdirat"),
			fileEv(policy.Provides, "/srv/cache/pytest-of-dev/pytest-0/test_a0/out.txt", "openat"),
			fileEv(policy.Consumes, "/srv/cache/pytest-of-dev/pytest-0/test_a0/out.txt", "openat"),
		},
		next: []event.Event{
			fileEv(policy.Provides, "/srv/cache/pytest-of-dev/pytest-3", "mkdirat"),
			fileEv(policy.Provides, "/srv/cache/pytest-of-dev/pytest-3/test_b0", "mkdirat"),
			fileEv(policy.Consumes, "/srv/cache/pytest-of-dev/pytest-3/test_b0/x", "openat"),
			renameEv("/srv/cache/pytest-of-dev/pytest-0", "/srv/cache/pytest-of-dev/garbage-4b1d", false),
			fileEv(policy.Deletes, "/srv/cache/pytest-of-dev/garbage-4b1d/test_a0/out.txt", "unlinkat"),
		},
		refused: []event.Event{
			fileEv(policy.Provides, "/srv/cache/other/x", "openat"),
			fileEv(policy.Mutates, "/srv/cache/pytest-of-dev/pytest-3/test_b0/x", "openat"),
		},
		want: []string{"RENAMES FILE:/srv/cache/pytest-of-dev/** # learned: numbered temporary directories"},
	}, {
		name: "a name alone is no family",
		m:    none,
		learn: []event.Event{
			fileEv(policy.Mutates, "/srv/data/notes-wal", "openat"),
			fileEv(policy.Mutates, "/srv/data/python-3/x", "openat"),
			fileEv(policy.Mutates, "/srv/data/x.tmp", "openat"),
		},
		unwanted: []string{"notes-shm", "notes-journal", "DELETES", "PROVIDES", "/srv/data/python-3/**", "/srv/data/**"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t) })
	}
}

// TestLearnedPrivateTmpScratch: with a private /tmp, what the run did in
// /tmp and /var/tmp is learned on their subtrees, written ${tmpdir}/**
// and /var/tmp/**, never a path of this run; the next run's other names
// there are CLEAN. With the host's /tmp the run's paths are learned as
// before.
func TestLearnedPrivateTmpScratch(t *testing.T) {
	scratch := []event.Event{
		fileEv(policy.Provides, "/tmp/tmp.Xa12", "openat"), fileEv(policy.Mutates, "/tmp/tmp.Xa12", "write"),
		renameEv("/tmp/tmp.Xa12", "/tmp/out.bin", false),
		fileEv(policy.Consumes, "/tmp/out.bin", "openat"), fileEv(policy.Deletes, "/tmp/out.bin", "unlinkat"),
		fileEv(policy.Provides, "/tmp/pytest-of-dev", "mkdirat"), fileEv(policy.Provides, "/tmp/pytest-of-dev/pytest-0", "mkdirat"),
		fileEv(policy.Provides, "/var/tmp/note.txt", "openat"),
	}
	next := []event.Event{
		fileEv(policy.Provides, "/tmp/tmp.Qz99", "openat"), renameEv("/tmp/tmp.Qz99", "/tmp/out.bin", false),
		fileEv(policy.Mutates, "/tmp/anything/else", "openat"), fileEv(policy.Deletes, "/tmp/pytest-of-dev/pytest-0", "unlinkat"),
		renameEv("/tmp/pytest-of-dev/pytest-0", "/tmp/pytest-of-dev/garbage-1", false),
		fileEv(policy.Provides, "/var/tmp/other.txt", "openat"),
	}
	learnCase{
		name: "private", m: manifestTmp(t, "private", "CONSUMES FILE:/srv/repo/**"),
		learn: scratch, next: next,
		refused: []event.Event{fileEv(policy.Mutates, "/srv/other/x", "openat"), fileEv(policy.Provides, "/var/lib/x", "openat")},
		want: []string{
			"PROVIDES FILE:${tmpdir}/** # learned: scratch in the session's private /tmp",
			"MUTATES FILE:${tmpdir}/**", "DELETES FILE:${tmpdir}/**", "RENAMES FILE:${tmpdir}/**", "CONSUMES FILE:${tmpdir}/**",
			"PROVIDES FILE:/var/tmp/** # learned: scratch in the session's private /var/tmp",
		},
		// note.txt was left, but the next run's /var/tmp starts empty:
		// its change and removal are not implied there.
		unwanted: []string{"FILE:/tmp", "tmp.Xa12", "pytest-of-dev", "MUTATES FILE:/var/tmp/**", "DELETES FILE:/var/tmp/**"},
	}.run(t)
	// A run that made and removed names there, and renamed none: the
	// next run's rename there is CLEAN (a name made and one removed).
	learnCase{
		name: "private, no rename", m: manifestTmp(t, "private", "CONSUMES FILE:/srv/repo/**"),
		learn: []event.Event{fileEv(policy.Provides, "/tmp/pip-1", "openat"), fileEv(policy.Deletes, "/tmp/pip-1", "unlinkat")},
		next:  []event.Event{renameEv("/tmp/pip-2", "/tmp/pip-3", false)},
		want:  []string{"RENAMES FILE:${tmpdir}/** # learned: the run made and removed names in the session's private /tmp"},
	}.run(t)
	// Made only: no rename is implied.
	learnCase{
		name: "private, made only", m: manifestTmp(t, "private", "CONSUMES FILE:/srv/repo/**"),
		learn:    []event.Event{fileEv(policy.Provides, "/tmp/out", "openat")},
		unwanted: []string{"RENAMES", "DELETES"},
	}.run(t)
	host := learnCase{name: "host", m: manifestTmp(t, "host", "CONSUMES FILE:/srv/repo/**"), learn: scratch,
		unwanted: []string{"${tmpdir}", "FILE:/var/tmp/**"}}.run(t)
	if !strings.Contains(host, "FILE:/tmp/") {
		t.Errorf("tmp: host: no /tmp path learned\n%s", host)
	}
}

// TestMergeLearnedKeepsFamilies: --learn over a run that saw SQLite's WAL
// made and one that did not keeps the family's intents, in either order.
func TestMergeLearnedKeepsFamilies(t *testing.T) {
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	db := "/srv/state/app.db"
	wal := learnFrom(t, m, nil, sqliteWAL(db)...)
	plain := learnFrom(t, m, nil, fileEv(policy.Consumes, db, "openat"), fileEv(policy.Mutates, "/etc/hosts", "openat"))
	for name, pair := range map[string][2][]byte{"wal first": {wal, plain}, "wal last": {plain, wal}} {
		t.Run(name, func(t *testing.T) {
			out, err := MergeLearned(pair[0], pair[1])
			if err != nil {
				t.Fatalf("MergeLearned: %v\n%s", err, out)
			}
			lm, err := policy.Parse("merged.yaml", out)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range append(leftWAL(db), fileEv(policy.Mutates, "/etc/hosts", "openat")) {
				strict := New(compile(t, lm), policy.ModeStrict)
				if v := strict.Observe(ev); v.Action != ActionAllow {
					t.Errorf("merged manifest refuses %s\n%s", ev.Triple, out)
				}
			}
		})
	}
}

// TestFamilyNames: the names each family recognises, and near misses.
func TestFamilyNames(t *testing.T) {
	at := func(x string, random bool) string { return fmt.Sprintf("%s %v", x, random) }
	for _, tc := range []struct {
		name   string
		got    any
		expect any
	}{
		{"sqlite -wal", sqliteDB("/a/state.sqlite-wal"), "/a/state.sqlite"},
		{"sqlite -journal", sqliteDB("/a/t.db-journal"), "/a/t.db"},
		{"sqlite plain", sqliteDB("/a/t.db"), ""},
		{"sqlite bare suffix", sqliteDB("/a/-wal"), ""},
		{"lock", lockName("app.lock"), true},
		{"dot lock", lockName(".app.lock"), true},
		{"lck", lockName("index.lck"), true},
		{"bare .lock", lockName(".lock"), false},
		{"locked", lockName("app.locked"), false},
		{"X.tmp", at(atomicTarget("a.json.tmp")), "a.json false"},
		{"X.tmp.N", at(atomicTarget("a.json.tmp.123")), "a.json true"},
		{"X.tmp.word", at(atomicTarget("a.json.tmp.abc")), " false"},
		{".X.random", at(atomicTarget(".a.json.Xy12Ab")), "a.json true"},
		{".X.short", at(atomicTarget(".a.json.x")), " false"},
		{"plain", at(atomicTarget("a.json")), " false"},
		{"pytest-N", numberedDir("pytest-12"), true},
		{"mkdtemp", numberedDir("tmpk2_x9a0b"), true},
		{"tmp short", numberedDir("tmpfiles"), false},
		{"-N only", numberedDir("-12"), false},
		{"digit word", numberedDir("1-2"), false},
		{"word digits", numberedDir("python3"), false},
	} {
		if tc.got != tc.expect {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.expect)
		}
	}
}
