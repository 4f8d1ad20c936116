package decide

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// learnRun is a permissive run with many kinds of violations.
func learnRun() []event.Event {
	var evs []event.Event
	for i := range 6 {
		evs = append(evs, fileEv(policy.Consumes, fmt.Sprintf("/opt/data/set/f%d.csv", i), "openat"))
	}
	for i := range 5 {
		evs = append(evs, fileEv(policy.Provides, fmt.Sprintf("/srv/repo/out/obj%d.o", i), "openat"))
		evs = append(evs, fileEv(policy.Mutates, fmt.Sprintf("/srv/repo/out/obj%d.o", i), "openat"))
	}
	for i := range 5 { // writes outside the workdir stay exact
		evs = append(evs, fileEv(policy.Mutates, fmt.Sprintf("/var/lib/app/s%d", i), "openat"))
	}
	for _, f := range []string{".bashrc", ".gitconfig", ".profile", ".netrc", ".ssh"} { // a home directory never collapses
		evs = append(evs, fileEv(policy.Consumes, "/home/dev/"+f, "openat"))
	}
	evs = append(evs,
		fileEv(policy.Mutates, "/etc/hosts", "openat"),
		fileEv(policy.Consumes, "/srv/other/a file with spaces", "openat"),
		fileEv(policy.Consumes, "/srv/other/weird*name", "openat"),
		fileEv(policy.Consumes, "/srv/other/${x}/y", "openat"),
		fileEv(policy.Deletes, "/srv/repo/src/gone.go", "unlinkat"),
		netEv("10.9.9.9:53", policy.ProtoUDP),
		netEv("[2001:db8::1]:443", policy.ProtoTCP),
		netEv("[::ffff:192.0.2.7]:80", policy.ProtoTCP),
		event.Event{Triple: policy.RawSocketTriple(), Syscall: "socket"},
		execEv("/usr/bin/curl"),
		fileEv(policy.Consumes, "relative/path", "openat"),
	)
	return evs
}

func TestLearnedRoundTrip(t *testing.T) {
	m := manifest(t, "permissive", "system-ro", repoIntents...)
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	evs := learnRun()
	for _, ev := range evs {
		e.Observe(ev)
	}
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	if os.Getenv("KLOCK_SHOW_LEARNED") != "" {
		t.Logf("%s", out)
	}
	lm, err := policy.Parse("learned.yaml", out)
	if err != nil {
		t.Fatalf("learned manifest does not parse: %v\n%s", err, out)
	}
	// Property: fed back, the learned manifest allows every observed
	// triple (in strict mode, replaying the same events).
	replay := New(compile(t, lm), policy.ModeStrict)
	for _, ev := range evs {
		if ev.Triple.Path == "relative/path" {
			continue // not expressible; listed in the header
		}
		if v := replay.Observe(ev); v.Action != ActionAllow {
			t.Errorf("replay: %s -> %s (%s)", ev.Triple, v.Action, v.Message())
		}
	}
	// Generalization.
	for _, want := range []string{
		"CONSUMES FILE:/opt/data/set/**",
		"PROVIDES FILE:${workdir}/out/**",
		"MUTATES FILE:/var/lib/app/s0",
		"CONSUMES FILE:/home/dev/.bashrc",
		"MUTATES FILE:/etc/hosts",
		"object: FILE:/srv/other/a file with spaces",
		"CONSUMES FILE:/srv/other/*",
		"DELETES FILE:${workdir}/src/gone.go",
		"CONSUMES NET:10.9.9.9:53/udp",
		"CONSUMES NET:[2001:db8::1]:443/tcp",
		"CONSUMES NET:192.0.2.7:80/tcp",
		"CONSUMES NET:raw",
		"PROVIDES PROC:/usr/bin/curl",
		"CONSUMES FILE:${workdir}/**", // original intent, contracted
		"#   CONSUMES FILE:relative/path",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("learned manifest lacks %q", want)
		}
	}
	// The objects the run made and wrote are there when the next run starts,
	// and written again: MUTATES on their directory is learned too.
	if !strings.Contains(string(out), "MUTATES FILE:${workdir}/out/**") {
		t.Errorf("learned manifest lacks the writes of the files the run left behind")
	}
	for _, bad := range []string{"/home/dev/**", "/var/lib/app/**", "signature:"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("learned manifest has %q", bad)
		}
	}
	if lm.Agent.ID != m.Agent.ID || lm.Workdir != m.Workdir || lm.CostEnvelope == nil || lm.CostEnvelope.MaxCost.Units != 20 {
		t.Errorf("original fields lost: %+v", lm)
	}
}

func TestLearnedExampleManifests(t *testing.T) {
	files, _ := filepath.Glob("../../examples/manifests/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example manifests: examples/manifests is part of the repository")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			m, err := policy.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			e := New(compile(t, m), policy.ModePermissive)
			e.Observe(fileEv(policy.Mutates, "/etc/hosts", "openat"))
			e.Observe(netEv("192.0.2.1:8443", policy.ProtoTCP))
			out, err := e.Learned(m, nil)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			lm, err := policy.Parse("learned.yaml", out)
			if err != nil {
				t.Fatal(err)
			}
			if len(lm.DeclaredTools) != len(m.DeclaredTools) || len(lm.Intents) != len(m.Intents)+2 {
				t.Fatalf("tools %d/%d intents %d/%d", len(lm.DeclaredTools), len(m.DeclaredTools), len(lm.Intents), len(m.Intents)+2)
			}
			for i := range m.Intents {
				if lm.Intents[i].String() != m.Intents[i].String() || lm.Intents[i].Reason != m.Intents[i].Reason {
					t.Errorf("intent %d: %s (%q) != %s (%q)", i, lm.Intents[i], lm.Intents[i].Reason, m.Intents[i], m.Intents[i].Reason)
				}
			}
		})
	}
}

func TestLearnedNothingToLearn(t *testing.T) {
	m := manifest(t, "strict", "none", repoIntents...)
	e := New(compile(t, m), policy.ModeStrict)
	e.Observe(fileEv(policy.Consumes, "/srv/repo/a", "openat"))
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "learned by klock run --learn: review") {
		t.Errorf("no learned section expected:\n%s", out)
	}
	if _, err := e.Learned(nil, nil); err == nil {
		t.Error("nil manifest: want error")
	}
}

func TestGeneralizeThreshold(t *testing.T) {
	obs := func(paths ...string) []learnObs {
		var out []learnObs
		for _, p := range paths {
			out = append(out, learnObs{t: policy.FileTriple(policy.Consumes, p), count: 1})
		}
		return out
	}
	tests := []struct {
		name      string
		paths     []string
		threshold int
		want      []string
	}{
		{"below threshold stays exact", []string{"/a/b/1", "/a/b/2"}, 3, []string{"FILE:/a/b/1", "FILE:/a/b/2"}},
		{"at threshold collapses", []string{"/a/b/1", "/a/b/2", "/a/b/3"}, 3, []string{"FILE:/a/b/**"}},
		{"collapses upwards", []string{"/a/b/c/1", "/a/b/c/2", "/a/b/d/1", "/a/b/d/2", "/a/b/x"}, 2, []string{"FILE:/a/b/**"}},
		{"never at depth one", []string{"/etc/a", "/etc/b", "/etc/c"}, 2, []string{"FILE:/etc/a", "FILE:/etc/b", "FILE:/etc/c"}},
		{"never under /proc", []string{"/proc/1/a", "/proc/1/b"}, 2, []string{"FILE:/proc/1/a", "FILE:/proc/1/b"}},
		{"directory itself absorbed", []string{"/a/b", "/a/b/1", "/a/b/2"}, 2, []string{"FILE:/a/b/**"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := generalize(obs(tc.paths...), "/srv/repo", tc.threshold)
			var objs []string
			for _, g := range got {
				objs = append(objs, g.obj)
			}
			if strings.Join(objs, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("got %v, want %v", objs, tc.want)
			}
		})
	}
}

// TestLearnedScratchDirs: in the host's /tmp (tmp: host), a directory the
// run made directly in a temp directory and created more inside (go
// build's $WORK) is declared as the temp directory's subtree, since its
// name changes from run to run, whatever the predicate; a file made there
// alone is declared on its directory's children; reads of files that were
// there stay exact. (A private /tmp: TestLearnedPrivateTmpScratch.)
func TestLearnedScratchDirs(t *testing.T) {
	m := manifestTmp(t, "host", "CONSUMES FILE:/srv/repo/**")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	for _, ev := range []event.Event{
		fileEv(policy.Provides, "/tmp/go-build123", "mkdirat"), fileEv(policy.Provides, "/tmp/go-build123/b001", "mkdirat"),
		fileEv(policy.Provides, "/tmp/go-build123/b001/exe/a.out", "openat"), fileEv(policy.Provides, "/var/tmp/lonely.txt", "openat"),
		fileEv(policy.Consumes, "/tmp/go-build123/b001/exe/a.out", "openat"), fileEv(policy.Deletes, "/tmp/go-build123/b001/exe/a.out", "unlinkat"),
		fileEv(policy.Consumes, "/srv/data/x", "openat"), fileEv(policy.Consumes, "/srv/data/x/y", "openat"),
	} {
		e.Observe(ev)
	}
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	for _, want := range []string{
		"PROVIDES FILE:/tmp/** # learned: in a directory the run made, go-build123",
		"CONSUMES FILE:/tmp/**", "DELETES FILE:/tmp/**",
		"PROVIDES FILE:/var/tmp/* # learned: a file the run made, lonely.txt",
		"CONSUMES FILE:/srv/data/x #", "CONSUMES FILE:/srv/data/x/y #",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("learned manifest lacks %q\n%s", want, out)
		}
	}
}

// TestLearnedDeclaresOwnFilesAWallWouldRefuse: the engine lets a session
// read, remove and rename files it created; a Landlock wall does not know
// whose a file is, and a PROVIDES scope gives it only make, write and
// truncate. A learned manifest declares those reads and removals (not the
// writes) on the scope the file was made in, so the strict run it is for
// gets through whichever wall.
func TestLearnedDeclaresOwnFilesAWallWouldRefuse(t *testing.T) {
	m := manifest(t, "permissive", "none", "PROVIDES FILE:/srv/repo/build/**")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	o := "/srv/repo/build/out.o"
	for _, ev := range []event.Event{
		fileEv(policy.Provides, o, "openat"), fileEv(policy.Mutates, o, "openat"),
		fileEv(policy.Consumes, o, "openat"), fileEv(policy.Deletes, o, "unlinkat"),
	} {
		if v := e.Observe(ev); v.Action != ActionAllow {
			t.Fatalf("%s: %v", ev.Triple, v.Action)
		}
	}
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	// On the scope it was made in: the file will not exist when the next
	// session starts, and a wall's rules attach to what exists. Reads in
	// the workdir are declared on all of it (workdirReads).
	for _, want := range []string{"CONSUMES FILE:${workdir}/**", "DELETES FILE:${workdir}/build/**"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("learned manifest lacks %s\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "MUTATES") {
		t.Errorf("learned a write the PROVIDES wall already allows\n%s", out)
	}
}

var _ = netip.Addr{}

// TestLearnedKeepsTheManifestAsWritten: given the manifest's own bytes, the
// learned manifest is those bytes (comments, flow style, fields left at
// their defaults) plus the learned intents, without the signature: the
// operator reviews the learned lines, not a re-encoding of everything.
func TestLearnedKeepsTheManifestAsWritten(t *testing.T) {
	src := []byte(`# The operator's own comment.
apiVersion: klock/v1
agent: {id: test-agent}
mode: permissive
workdir: /srv/repo
baseline: none
intents:
  - CONSUMES FILE:${workdir}/** # the whole repo
  - {predicate: PROVIDES, object: "PROC:/bin/sh", confidence: High, reason: tests run sh}
declared_tools:
  - name: read_file
    type: read
    blast_radius: read
    category: B
    side_effects: READ
` + costEnvelope + `signature: {algorithm: ed25519, public_key: "k", value: "s"}
`)
	m, err := policy.Parse("m.yaml", src)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	e.Observe(fileEv(policy.Mutates, "/etc/hosts", "openat"))
	out, err := e.Learned(m, src)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	for _, want := range []string{
		"# The operator's own comment.",
		"- CONSUMES FILE:${workdir}/** # the whole repo",
		`- {predicate: PROVIDES, object: "PROC:/bin/sh", confidence: High, reason: tests run sh}`,
		"- MUTATES FILE:/etc/hosts # learned",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("learned manifest lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"signature:", "rate_limit", "timeout_ms", "untrusted_content"} {
		if strings.Contains(string(out), unwanted) {
			t.Errorf("learned manifest has %q, which the operator did not write:\n%s", unwanted, out)
		}
	}
}

// TestLearnedDeclaresTemporaryFilesOnTheirDirectory: sed -i makes a file
// of a random name beside its target, writes it and renames it over the
// target. Declared exactly, that name would refuse the next run, which
// picks another: the learned manifest declares the directory's children for
// it, and the next run's own temporary name goes through in strict mode.
// A temporary file outside the workdir and the temp directories stays exact.
func TestLearnedDeclaresTemporaryFilesOnTheirDirectory(t *testing.T) {
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	run := func(e *Engine, tmp string) []Verdict {
		var vs []Verdict
		for _, ev := range []event.Event{
			fileEv(policy.Provides, tmp, "openat"), fileEv(policy.Mutates, tmp, "write"),
			fileEv(policy.Renames, tmp, "rename"), fileEv(policy.Mutates, "/srv/repo/docs/README.md", "rename"),
		} {
			vs = append(vs, e.Observe(ev))
		}
		return vs
	}
	run(e, "/srv/repo/docs/sed18VCEj")
	e.Observe(fileEv(policy.Provides, "/etc/klock-tmp1", "openat"))
	e.Observe(fileEv(policy.Deletes, "/etc/klock-tmp1", "unlinkat"))
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	for _, want := range []string{
		`PROVIDES FILE:${workdir}/docs/* # learned: a temporary file of the run, sed18VCEj`,
		"RENAMES FILE:${workdir}/docs/*", "MUTATES FILE:${workdir}/docs/README.md",
		"PROVIDES FILE:/etc/klock-tmp1", "DELETES FILE:/etc/klock-tmp1",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("learned manifest lacks %s\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "FILE:${workdir}/docs/sed18VCEj") {
		t.Errorf("learned the temporary file's exact name\n%s", out)
	}
	next, err := policy.Parse("learned.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	strict := New(compile(t, next), policy.ModeStrict, WithClock(fakeClock()))
	for _, v := range run(strict, "/srv/repo/docs/sedQ2xw9Z") {
		if v.Action != ActionAllow {
			t.Fatalf("the next run, with another temporary name: %s %v (%v)", v.Triple, v.Action, v.Err)
		}
	}
}

// TestLearnedCountsTemporaryFilesTowardsTheirDirectory: temporary files
// declared on dir/* still count, each, among the paths that make --learn
// declare the directory's subtree.
func TestLearnedCountsTemporaryFilesTowardsTheirDirectory(t *testing.T) {
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	for _, tmp := range []string{"/srv/repo/build/t1", "/srv/repo/build/t2"} {
		e.Observe(fileEv(policy.Provides, tmp, "openat"))
		e.Observe(fileEv(policy.Deletes, tmp, "unlinkat"))
	}
	e.Observe(fileEv(policy.Provides, "/srv/repo/build/x", "openat"))
	e.Observe(fileEv(policy.Provides, "/srv/repo/build/y", "openat"))
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	// x and y are left behind, so their removal by the next run is
	// declared too (leftBehind): four paths, the subtree.
	for _, want := range []string{"PROVIDES FILE:${workdir}/build/** # learned: 4 observed paths collapsed", "DELETES FILE:${workdir}/build/** # learned: 4 observed paths collapsed"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("learned manifest lacks %s\n%s", want, out)
		}
	}
}

// TestLearnedDeclaresBuiltProgramsOnTheirDirectory: a program the run made
// and then executed is declared on its directory's children, once for all
// the programs built there; a program that was there before stays exact.
func TestLearnedDeclaresBuiltProgramsOnTheirDirectory(t *testing.T) {
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**", "PROVIDES FILE:/srv/repo/build/**")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	for _, p := range []string{"/srv/repo/build/app", "/srv/repo/build/tool"} {
		e.Observe(fileEv(policy.Provides, p, "openat"))
		e.Observe(event.Event{Source: event.SourceTracepoint, Triple: policy.ExecTriple(p), PID: 42, Comm: "make", Syscall: "execve"})
	}
	e.Observe(event.Event{Source: event.SourceTracepoint, Triple: policy.ExecTriple("/srv/repo/run.sh"), PID: 42, Comm: "make", Syscall: "execve"})
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "PROVIDES PROC:${workdir}/build/* # learned: a program the run built"); n != 1 {
		t.Errorf("PROVIDES PROC:${workdir}/build/* learned %d times, want once\n%s", n, out)
	}
	if !strings.Contains(string(out), "PROVIDES PROC:${workdir}/run.sh # learned: seen once") {
		t.Errorf("a program that was there before is not declared exactly\n%s", out)
	}
}

// TestLearnedWorkdirReadsCoverTheNextInput: the files a run reads in its
// workdir are its input, and the next run's differ: pytest's new
// tests/test_more.py and npm's greet-2.3.0.tgz killed strict runs learned
// from tests/test_calc.py and greet-1.0.0.tgz. Reads outside
// the workdir stay exact.
func TestLearnedWorkdirReadsCoverTheNextInput(t *testing.T) {
	m := manifest(t, "permissive", "none")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	for _, ev := range []event.Event{
		fileEv(policy.Consumes, "/srv/repo/tests/test_calc.py", "openat"),
		fileEv(policy.Consumes, "/srv/repo/vendor/greet-1.0.0.tgz", "openat"),
		fileEv(policy.Consumes, "/etc/npmrc", "openat"),
	} {
		e.Observe(ev)
	}
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	for _, want := range []string{"CONSUMES FILE:${workdir}/**", "CONSUMES FILE:/etc/npmrc"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("learned manifest lacks %s\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "test_calc.py") || strings.Contains(string(out), "greet-1.0.0") {
		t.Errorf("learned manifest pins this run's input files\n%s", out)
	}
}

// TestLearnedDeclaresRemovingWhatTheRunLeft: a run that made build/hello
// and left it: the next run, with the file there, relinks it (the linker
// removes its old output first). Learned from a run that only made it, the
// strict run was killed for DELETES build/hello (the README's own flow:
// learn `make build`, edit a source, run strict).
func TestLearnedDeclaresRemovingWhatTheRunLeft(t *testing.T) {
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	observeAll(e, fileEv(policy.Provides, "/srv/repo/build", "mkdirat"),
		fileEv(policy.Provides, "/srv/repo/build/hello", "openat"), fileEv(policy.Mutates, "/srv/repo/build/hello", "write"))
	out, err := e.Learned(m, nil)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	next, err := policy.Parse("learned.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	strict := New(compile(t, next), policy.ModeStrict, WithClock(fakeClock()))
	if v := strict.Observe(fileEv(policy.Deletes, "/srv/repo/build/hello", "unlinkat")); v.Action != ActionAllow {
		t.Errorf("the next run's relink: %s %v (%v)\n%s", v.Triple, v.Action, v.Err, out)
	}
	if !strings.Contains(string(out), "not done by this run, implied by it") {
		t.Errorf("the implied removal is not marked as such\n%s", out)
	}
}
