package decide

import (
	"fmt"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// manifestAt is manifest with another workdir.
func manifestAt(t testing.TB, workdir string, intents ...string) *policy.Manifest {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: klock/v1\nagent: {id: test-agent}\nmode: permissive\nworkdir: %s\nbaseline: none\nintents:\n", workdir)
	for _, in := range intents {
		fmt.Fprintf(&b, "  - %q\n", in)
	}
	b.WriteString(costEnvelope)
	m, err := policy.Parse("test.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("parse manifest: %v\n%s", err, b.String())
	}
	return m
}

// learnThenStrict learns a manifest from run(first) in permissive mode,
// then replays run(next) against it in strict mode and fails on any
// verdict that is not an allow. It returns the learned manifest.
func learnThenStrict(t *testing.T, m *policy.Manifest, run func(e *Engine, input int) []Verdict) string {
	t.Helper()
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	run(e, 1)
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	lm, err := policy.Parse("learned.yaml", out)
	if err != nil {
		t.Fatalf("the learned manifest does not parse: %v\n%s", err, out)
	}
	strict := New(compile(t, lm), policy.ModeStrict, WithClock(fakeClock()))
	for _, v := range run(strict, 2) {
		if v.Action != ActionAllow {
			t.Errorf("the next run, with other input: %s → %v (%v)", v.Triple, v.Action, v.Err)
		}
	}
	if t.Failed() {
		t.Logf("learned manifest:\n%s", out)
	}
	return string(out)
}

func observeAll(e *Engine, evs ...event.Event) []Verdict {
	var vs []Verdict
	for _, ev := range evs {
		vs = append(vs, e.Observe(ev))
	}
	return vs
}

// gitCommit is what git commit does in a repository that exists: its new
// objects land in fan-out directories named by their hash's first byte,
// some there already (ab), others made for them; each is written as a
// temporary file and linked to its name; an object it already has gets
// its time refreshed; the index and the branch are replaced through lock
// files.
func gitCommit(e *Engine, objects []string, fresh string, newDirs map[string]bool) []Verdict {
	g := "/srv/repo/.git"
	var evs []event.Event
	for i, h := range objects {
		dir := g + "/objects/" + h[:2]
		if newDirs[h[:2]] {
			evs = append(evs, fileEv(policy.Provides, dir, "mkdirat"))
		}
		tmp := fmt.Sprintf("%s/tmp_obj_%d%s", dir, i, h[2:6])
		link := fileEv(policy.Provides, dir+"/"+h[2:], "linkat")
		link.Extra = policy.FileTriple(policy.Consumes, tmp)
		evs = append(evs, fileEv(policy.Provides, tmp, "openat"), fileEv(policy.Mutates, tmp, "write"), link, fileEv(policy.Deletes, tmp, "unlinkat"))
	}
	evs = append(evs,
		fileEv(policy.Mutates, g+"/objects/"+fresh[:2]+"/"+fresh[2:], "utimensat"),
		fileEv(policy.Provides, g+"/index.lock", "openat"), renameEv(g+"/index.lock", g+"/index", true),
		fileEv(policy.Provides, g+"/refs/heads/main.lock", "openat"), renameEv(g+"/refs/heads/main.lock", g+"/refs/heads/main", true),
		fileEv(policy.Mutates, g+"/logs/HEAD", "openat"),
	)
	return observeAll(e, evs...)
}

// TestLearnedOwnFilesLetTheNextCommitThrough: the objects of a commit are
// named by their hashes, which the next commit does not repeat, and git
// refreshes an object it already has (MUTATES on an existing file). A
// manifest learned from one commit must let another commit through in
// strict mode, and declare the stable names (the index, the branch)
// exactly.
func TestLearnedOwnFilesLetTheNextCommitThrough(t *testing.T) {
	m := manifestAt(t, "/srv/repo", "CONSUMES FILE:${workdir}/**")
	out := learnThenStrict(t, m, func(e *Engine, input int) []Verdict {
		if input == 1 {
			return gitCommit(e, []string{"3f1c2d3e4f", "8a9b0c1d2e", "ab12345678"}, "ab99887766", map[string]bool{"3f": true, "8a": true})
		}
		return gitCommit(e, []string{"c47d1e2f3a", "7d0e1f2a3b", "e5a1b2c3d4"}, "e5ffeeddcc", map[string]bool{"c4": true, "7d": true})
	})
	for _, want := range []string{
		"PROVIDES FILE:${workdir}/.git/objects/** # learned: ",
		"MUTATES FILE:${workdir}/.git/objects/** # learned: an existing file among the run's own",
		"MUTATES FILE:${workdir}/.git/index #",
		"MUTATES FILE:${workdir}/.git/refs/heads/main #",
		"MUTATES FILE:${workdir}/.git/logs/HEAD #",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("learned manifest lacks %q\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if intent, _, _ := strings.Cut(line, "#"); strings.Contains(intent, "c2d3e4f") || strings.Contains(intent, "tmp_obj") {
			t.Errorf("an intent pins a name of this run: %s", line)
		}
	}
}

// TestLearnedTimestampedAndBuiltNames: npm's debug log is named by the
// time of the run, go test's $WORK by a number chosen at each run and the
// test binary it runs lives inside. Learned from one run, the next run's
// names go through in strict mode.
func TestLearnedTimestampedAndBuiltNames(t *testing.T) {
	m := manifestAt(t, "/srv/repo", "CONSUMES FILE:${workdir}/**")
	learnThenStrict(t, m, func(e *Engine, input int) []Verdict {
		log := fmt.Sprintf("/home/dev/.npm/_logs/2025-01-0%dT03_04_05_123Z-debug-0.log", input)
		work := fmt.Sprintf("/tmp/go-build%d", 1000+input)
		bin := work + "/b001/pkg.test"
		run := execEv(bin)
		run.Extra = policy.Triple{}
		return observeAll(e,
			fileEv(policy.Provides, log, "openat"), fileEv(policy.Mutates, log, "write"),
			fileEv(policy.Provides, work, "mkdirat"), fileEv(policy.Provides, work+"/b001", "mkdirat"),
			fileEv(policy.Provides, bin, "openat"), fileEv(policy.Mutates, bin, "write"),
			fileEv(policy.Consumes, bin, "openat"), run,
			fileEv(policy.Deletes, bin, "unlinkat"), fileEv(policy.Deletes, work+"/b001", "unlinkat"), fileEv(policy.Deletes, work, "unlinkat"),
		)
	})
}

// TestLearnedKeepsATmpWorkdirOnItself: with the workdir in /tmp, what the
// run did in its own temp directory is declared on /tmp/**, and what it did
// in the workdir stays declared on the workdir, for the review.
func TestLearnedKeepsATmpWorkdirOnItself(t *testing.T) {
	m := manifestAt(t, "/tmp/wd", "CONSUMES FILE:${workdir}/**")
	out := learnThenStrict(t, m, func(e *Engine, input int) []Verdict {
		work := fmt.Sprintf("/tmp/go-build%d", input)
		return observeAll(e,
			fileEv(policy.Provides, work, "mkdirat"), fileEv(policy.Provides, work+"/b001", "mkdirat"),
			fileEv(policy.Provides, "/tmp/wd/out.txt", "openat"),
			fileEv(policy.Mutates, "/tmp/wd/config.yaml", "openat"),
			fileEv(policy.Provides, "/tmp/wd/build", "mkdirat"), fileEv(policy.Provides, "/tmp/wd/build/app", "openat"),
		)
	})
	for _, want := range []string{
		"PROVIDES FILE:/tmp/** # learned: in a directory the run made, go-build1",
		"PROVIDES FILE:${workdir}/** # learned: in a directory the run made, build",
		"MUTATES FILE:${workdir}/config.yaml #",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("learned manifest lacks %q\n%s", want, out)
		}
	}
}

// TestLearnedRefreshedTimesAmongOwnFiles: a cache that marks an entry it
// reuses by refreshing its time, in a directory where the run also made
// entries, is declared on the directory's children: the next run reuses
// another entry.
func TestLearnedRefreshedTimesAmongOwnFiles(t *testing.T) {
	m := manifestAt(t, "/srv/repo", "CONSUMES FILE:${workdir}/**")
	learnThenStrict(t, m, func(e *Engine, input int) []Verdict {
		c := "/srv/repo/.cache/"
		return observeAll(e,
			fileEv(policy.Provides, fmt.Sprintf("%sentry-new-%d", c, input), "openat"),
			fileEv(policy.Mutates, fmt.Sprintf("%sentry-old-%d", c, input), "utimensat"),
		)
	})
}

// TestLearnedOwnFilesTheNextRunFinds: a file the run made and left behind
// (a cache entry, a usage counter) is there when the next run starts, and
// written again: a write to an existing file, which the learned manifest
// must declare as well. One it made and removed needs no write declared.
func TestLearnedOwnFilesTheNextRunFinds(t *testing.T) {
	m := manifestAt(t, "/srv/repo", "CONSUMES FILE:${workdir}/**")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	c, tmp := "/srv/repo/.cache/count-2025-01-02", "/srv/repo/.cache/tmp1"
	observeAll(e, fileEv(policy.Provides, c, "openat"), fileEv(policy.Mutates, c, "write"),
		fileEv(policy.Provides, tmp, "openat"), fileEv(policy.Mutates, tmp, "write"), fileEv(policy.Deletes, tmp, "unlinkat"))
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	lm, err := policy.Parse("learned.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	strict := New(compile(t, lm), policy.ModeStrict)
	if v := strict.Observe(fileEv(policy.Mutates, c, "openat")); v.Action != ActionAllow {
		t.Errorf("the next run writes the file the first left: %v (%v)\n%s", v.Action, v.Err, out)
	}
}

// go on a fresh account whose home is outside the workdir: the first run
// makes ~/.cache/go-build (a hash fan-out), ~/.config/go/telemetry (files
// named by the date) and ~/go/pkg/mod/cache/lock (opened O_RDWR|O_CREAT,
// never written). The next run finds them: its mkdirs get EEXIST, its open
// of the lock is a MUTATES of an existing file, its cache entries and
// telemetry files have other names. The learned manifest declared
// thousands of exact cache paths and no MUTATES of the lock, and the next
// strict run was killed at its first go command; then, its cache warm, at
// go run's exec of the program go kept in the cache.
func TestLearnToolStateInAHomeOutsideTheWorkdir(t *testing.T) {
	h := "/home/someone"
	m := manifestAt(t, h+"/proj")
	eexist := func(ev event.Event) event.Event { ev.Errno = 17; return ev }
	out := learnThenStrict(t, m, func(e *Engine, input int) []Verdict {
		var evs []event.Event
		mk := func(p string) event.Event {
			if input == 1 {
				return fileEv(policy.Provides, p, "mkdirat")
			}
			return eexist(fileEv(policy.Provides, p, "mkdirat"))
		}
		for _, d := range []string{h + "/.cache", h + "/.cache/go-build", h + "/.config", h + "/.config/go", h + "/go", h + "/go/pkg", h + "/go/pkg/mod", h + "/go/pkg/mod/cache"} {
			evs = append(evs, mk(d))
		}
		lock := h + "/go/pkg/mod/cache/lock"
		if input == 1 {
			evs = append(evs, fileEv(policy.Provides, lock, "openat"))
		} else {
			evs = append(evs, fileEv(policy.Mutates, lock, "openat"))
		}
		for i := 0; i < 6; i++ {
			hash := fmt.Sprintf("%02x%062x", i*40+input, input)
			dir := h + "/.cache/go-build/" + hash[:2]
			evs = append(evs, fileEv(policy.Provides, dir, "mkdirat"),
				fileEv(policy.Provides, dir+"/"+hash+"-d", "openat"),
				fileEv(policy.Mutates, dir+"/"+hash+"-d", "write"),
				fileEv(policy.Consumes, dir+"/"+hash+"-d", "openat"))
		}
		// go run: linked in its work directory and run from there on a
		// cold cache, and kept in the cache; run from the cache when warm.
		cached := fmt.Sprintf("%s/.cache/go-build/ae/ae%062x-d", h, 7)
		if input == 1 {
			exe := "/tmp/go-build123/b001/exe/app"
			run := execEv(exe)
			evs = append(evs, fileEv(policy.Provides, "/tmp/go-build123", "mkdirat"), fileEv(policy.Provides, "/tmp/go-build123/b001", "mkdirat"),
				fileEv(policy.Provides, "/tmp/go-build123/b001/exe", "mkdirat"), fileEv(policy.Provides, exe, "openat"), run,
				fileEv(policy.Provides, h+"/.cache/go-build/ae", "mkdirat"), fileEv(policy.Provides, cached, "mkdirat"),
				fileEv(policy.Provides, cached+"/app", "openat"), fileEv(policy.Mutates, cached+"/app", "write"))
		} else {
			evs = append(evs, execEv(cached+"/app"))
		}
		count := fmt.Sprintf("%s/.config/go/telemetry/local/go@go1.26-2026-11-%02d.v1.count", h, 20+input)
		evs = append(evs, fileEv(policy.Provides, h+"/.config/go/telemetry", "mkdirat"),
			fileEv(policy.Provides, h+"/.config/go/telemetry/local", "mkdirat"),
			fileEv(policy.Provides, count, "openat"), fileEv(policy.Mutates, count, "openat"))
		return observeAll(e, evs...)
	})
	for _, want := range []string{"PROVIDES FILE:" + h + "/.cache/**", "PROVIDES FILE:" + h + "/.config/**", "MUTATES FILE:" + h + "/go/**", "PROVIDES PROC:" + h + "/.cache/**"} {
		if !strings.Contains(out, want+" ") {
			t.Errorf("learned manifest lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FILE:"+h+"/** ") || strings.Contains(out, "FILE:"+h+"/* ") {
		t.Errorf("learned a scope on the whole home directory:\n%s", out)
	}
	if strings.Contains(out, "go-build/") {
		t.Errorf("learned exact cache entries:\n%s", out)
	}
}

// GOCACHE where an operator put it, outside the workdir, the temporary
// directories and the homes (/srv/cache/go-build, there and empty before
// the first run): the run fills a hash fan-out there. Its entries were
// declared one by one (4,000 exact paths) and the next run, whose hashes
// differ, was killed at its first new entry.
func TestLearnHashFanOutOutsideTheScratchAreas(t *testing.T) {
	g := "/srv/cache/go-build"
	m := manifestAt(t, "/srv/repo")
	out := learnThenStrict(t, m, func(e *Engine, input int) []Verdict {
		evs := []event.Event{fileEv(policy.Provides, g+"/README", "openat")}
		if input == 2 {
			evs[0].Errno = 17 // there from the first run
		}
		for i := 0; i < 5; i++ {
			hash := fmt.Sprintf("%02x%062x", i*50+input, input)
			dir := g + "/" + hash[:2]
			evs = append(evs, fileEv(policy.Provides, dir, "mkdirat"),
				fileEv(policy.Provides, dir+"/"+hash+"-d", "openat"), fileEv(policy.Mutates, dir+"/"+hash+"-d", "write"),
				fileEv(policy.Consumes, dir+"/"+hash+"-d", "openat"))
		}
		return observeAll(e, evs...)
	})
	if !strings.Contains(out, "PROVIDES FILE:"+g+"/** ") || strings.Contains(out, g+"/0") {
		t.Errorf("the fan-out is not declared on its subtree:\n%s", out)
	}
	if strings.Contains(out, "FILE:/srv/cache/** ") || strings.Contains(out, "FILE:/srv/** ") {
		t.Errorf("declared above the fan-out:\n%s", out)
	}
}
