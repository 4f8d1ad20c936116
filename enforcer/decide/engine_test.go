package decide

import (
	"strings"
	"sync"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

var repoIntents = []string{
	"CONSUMES FILE:/srv/repo/**",
	"MUTATES FILE:/srv/repo/src/**",
	"PROVIDES FILE:/srv/repo/build/**",
	"CONSUMES NET:10.0.0.1:443/tcp",
	"PROVIDES PROC:/usr/bin/git",
	"DELETES FILE:/srv/repo/tmp/**",
}

func TestObserveVerdicts(t *testing.T) {
	type step struct {
		ev     event.Event
		want   Action
		errMsg string // exact ScopeViolationError text when a violation
	}
	tests := []struct {
		name  string
		mode  policy.Mode
		steps []step
	}{
		{"strict allows declared operations", policy.ModeStrict, []step{
			{ev: fileEv(policy.Consumes, "/srv/repo/README", "openat"), want: ActionAllow},
			{ev: fileEv(policy.Mutates, "/srv/repo/src/a.go", "openat"), want: ActionAllow},
			{ev: fileEv(policy.Consumes, "/etc/hosts", "openat"), want: ActionAllow}, // baseline
			{ev: netEv("10.0.0.1:443", policy.ProtoTCP), want: ActionAllow},
			{ev: execEv("/usr/bin/git"), want: ActionAllow},
		}},
		{"strict kills on first violation and not before", policy.ModeStrict, []step{
			{ev: fileEv(policy.Consumes, "/srv/repo/a", "openat"), want: ActionAllow},
			{ev: fileEv(policy.Mutates, "/srv/repo/src/a.go", "openat"), want: ActionAllow},
			{ev: fileEv(policy.Mutates, "/etc/hosts", "openat"), want: ActionKill,
				errMsg: "ScopeViolationError: Agent attempted MUTATES on /etc/hosts but only declared CONSUMES"},
		}},
		{"strict kills a blocked attempt too", policy.ModeStrict, []step{
			{ev: blocked(fileEv(policy.Mutates, "/srv/repo/README", "openat")), want: ActionKill,
				errMsg: "ScopeViolationError: Agent attempted MUTATES on /srv/repo/README but only declared CONSUMES"},
		}},
		{"strict undeclared object", policy.ModeStrict, []step{
			{ev: fileEv(policy.Consumes, "/root/.ssh/id_rsa", "openat"), want: ActionKill,
				errMsg: "ScopeViolationError: Agent attempted CONSUMES on /root/.ssh/id_rsa but declared nothing there"},
		}},
		{"strict undeclared address", policy.ModeStrict, []step{
			{ev: netEv("10.0.0.2:443", policy.ProtoTCP), want: ActionKill,
				errMsg: "ScopeViolationError: Agent attempted CONSUMES on NET:10.0.0.2:443/tcp but declared nothing there"},
		}},
		{"strict exec of undeclared binary", policy.ModeStrict, []step{
			{ev: execEv("/usr/bin/curl"), want: ActionKill,
				errMsg: "ScopeViolationError: Agent attempted PROVIDES on /usr/bin/curl but declared nothing there"},
		}},
		{"strict violation in Extra (rename destination)", policy.ModeStrict, []step{
			{ev: renameEv("/srv/repo/build/x", "/srv/repo/src/x", false), want: ActionKill},
		}},
		{"permissive amends then allows the same op", policy.ModePermissive, []step{
			{ev: fileEv(policy.Mutates, "/etc/hosts", "openat"), want: ActionAmended,
				errMsg: "ScopeViolationError: Agent attempted MUTATES on /etc/hosts but only declared CONSUMES"},
			{ev: fileEv(policy.Mutates, "/etc/hosts", "openat"), want: ActionAllow},
			{ev: netEv("10.9.9.9:53", policy.ProtoUDP), want: ActionAmended},
			{ev: netEv("10.9.9.9:53", policy.ProtoUDP), want: ActionAllow},
			{ev: netEv("10.9.9.9:54", policy.ProtoUDP), want: ActionAmended},
		}},
		{"permissive blocked is recorded and leased", policy.ModePermissive, []step{
			{ev: blocked(fileEv(policy.Consumes, "/opt/secret", "openat")), want: ActionBlocked},
			{ev: fileEv(policy.Consumes, "/opt/secret", "openat"), want: ActionAllow},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New(compile(t, manifest(t, string(tc.mode), "system-ro", repoIntents...)), tc.mode, WithClock(fakeClock()))
			kills := 0
			for i, s := range tc.steps {
				v := e.Observe(s.ev)
				if v.Action != s.want {
					t.Fatalf("step %d (%s): action %s, want %s (%s)", i, s.ev.Triple, v.Action, s.want, v.Message())
				}
				if (v.Action == ActionAllow) == v.Violation() {
					t.Errorf("step %d: action %s but Violation()=%v", i, v.Action, v.Violation())
				}
				if s.errMsg != "" && v.Message() != s.errMsg {
					t.Errorf("step %d: message\n got %q\nwant %q", i, v.Message(), s.errMsg)
				}
				if v.Blocked != s.ev.Blocked {
					t.Errorf("step %d: Blocked=%v, want %v", i, v.Blocked, s.ev.Blocked)
				}
				if v.Action == ActionKill {
					kills++
					if v.First != (kills == 1) {
						t.Errorf("step %d: First=%v on kill #%d", i, v.First, kills)
					}
				}
				if v.Action == ActionAmended || v.Action == ActionBlocked {
					if v.Lease == nil || v.Lease.Origin != "lease" {
						t.Errorf("step %d: lease %+v, want an Origin lease intent", i, v.Lease)
					}
				}
			}
			if got := e.Terminated() != nil; got != (kills > 0) {
				t.Errorf("Terminated()=%v with %d kills", got, kills)
			}
		})
	}
}

func TestStrictKeepsKillingAfterFirst(t *testing.T) {
	e := New(compile(t, manifest(t, "strict", "none", repoIntents...)), policy.ModeStrict)
	v1 := e.Observe(fileEv(policy.Mutates, "/etc/a", "openat"))
	v2 := e.Observe(fileEv(policy.Mutates, "/etc/b", "openat"))
	v3 := e.Observe(fileEv(policy.Consumes, "/srv/repo/x", "openat"))
	if !v1.First || v2.First || v2.Action != ActionKill || v3.Action != ActionAllow {
		t.Fatalf("v1=%+v v2=%+v v3=%+v", v1, v2, v3)
	}
	if term := e.Terminated(); term == nil || term.Triple.Path != "/etc/a" {
		t.Fatalf("Terminated = %+v, want the /etc/a verdict", term)
	}
	if r := e.Records(); len(r.Violations) != 2 {
		t.Fatalf("violations = %d, want 2 (both recorded)", len(r.Violations))
	}
}

func TestModeDefaultsToStrict(t *testing.T) {
	e := New(compile(t, manifest(t, "permissive", "none", repoIntents...)), "")
	if e.Mode() != policy.ModeStrict {
		t.Fatalf("mode %q, want strict", e.Mode())
	}
	if v := e.Observe(fileEv(policy.Mutates, "/etc/a", "openat")); v.Action != ActionKill {
		t.Fatalf("action %s, want kill", v.Action)
	}
}

func TestLost(t *testing.T) {
	tests := []struct {
		mode policy.Mode
		want Action
	}{
		{policy.ModeStrict, ActionKill},
		{policy.ModePermissive, ActionAllow},
	}
	for _, tc := range tests {
		t.Run(string(tc.mode), func(t *testing.T) {
			e := New(compile(t, manifest(t, string(tc.mode), "none", repoIntents...)), tc.mode, WithClock(fakeClock()))
			v := e.Lost(event.Lost{Count: 3})
			if v.Action != tc.want {
				t.Fatalf("action %s, want %s", v.Action, tc.want)
			}
			if tc.want == ActionKill && (!v.First || !strings.Contains(v.Message(), "lost 3 kernel event") || !strings.Contains(v.Message(), "fails closed")) {
				t.Fatalf("kill verdict %+v lacks a clear reason", v)
			}
			e.Lost(event.Lost{Count: 2})
			r := e.Records()
			if r.LostTotal != 5 || len(r.Lost) != 2 {
				t.Fatalf("lost total %d records %d, want 5 and 2", r.LostTotal, len(r.Lost))
			}
			if (r.Kill != nil) != (tc.want == ActionKill) {
				t.Fatalf("Kill=%+v", r.Kill)
			}
		})
	}
}

func TestCreatedFiles(t *testing.T) {
	type step struct {
		ev   event.Event
		want Action
	}
	okCreate := func(p string) event.Event { return fileEv(policy.Provides, p, "openat") }
	tests := []struct {
		name  string
		steps []step
	}{
		{"create then write, read and delete", []step{
			{okCreate("/srv/repo/build/out.o"), ActionAllow},
			{fileEv(policy.Mutates, "/srv/repo/build/out.o", "openat"), ActionAllow},
			{fileEv(policy.Consumes, "/srv/repo/build/out.o", "openat"), ActionAllow},
			{fileEv(policy.Deletes, "/srv/repo/build/out.o", "unlinkat"), ActionAllow},
			// Gone: no longer ours.
			{fileEv(policy.Mutates, "/srv/repo/build/out.o", "openat"), ActionKill},
		}},
		{"pre-existing file in PROVIDES scope is not writable", []step{
			{fileEv(policy.Mutates, "/srv/repo/build/old.o", "openat"), ActionKill},
		}},
		{"failed create grants nothing", []step{
			{func() event.Event { e := okCreate("/srv/repo/build/x"); e.Errno = 17; return e }(), ActionAllow},
			{fileEv(policy.Mutates, "/srv/repo/build/x", "openat"), ActionKill},
		}},
		{"hard link is not a creation", []step{
			{fileEv(policy.Provides, "/srv/repo/build/secret", "linkat"), ActionAllow},
			{fileEv(policy.Mutates, "/srv/repo/build/secret", "openat"), ActionKill},
		}},
		{"no syscall name is not a creation", []step{
			{fileEv(policy.Provides, "/srv/repo/build/y", ""), ActionAllow},
			{fileEv(policy.Mutates, "/srv/repo/build/y", "openat"), ActionKill},
		}},
		{"created file cannot be executed", []step{
			{okCreate("/srv/repo/build/a.out"), ActionAllow},
			{execEv("/srv/repo/build/a.out"), ActionKill},
		}},
		{"temp then rename keeps ownership at destination", []step{
			{okCreate("/srv/repo/build/.tmp1"), ActionAllow},
			{renameEv("/srv/repo/build/.tmp1", "/srv/repo/build/final", false), ActionAllow},
			{fileEv(policy.Mutates, "/srv/repo/build/final", "openat"), ActionAllow},
			{fileEv(policy.Mutates, "/srv/repo/build/.tmp1", "openat"), ActionKill},
		}},
		{"rename of a hard link over a created file clears ownership", []step{
			{okCreate("/srv/repo/build/x"), ActionAllow},
			{fileEv(policy.Provides, "/srv/repo/build/link", "linkat"), ActionAllow},
			{renameEv("/srv/repo/build/link", "/srv/repo/build/x", true), ActionAllow},
			{fileEv(policy.Mutates, "/srv/repo/build/x", "openat"), ActionKill},
		}},
		{"created directory moves with its children", []step{
			{fileEv(policy.Provides, "/srv/repo/build/d", "mkdirat"), ActionAllow},
			{okCreate("/srv/repo/build/d/f"), ActionAllow},
			{renameEv("/srv/repo/build/d", "/srv/repo/build/e", false), ActionAllow},
			{fileEv(policy.Mutates, "/srv/repo/build/e/f", "openat"), ActionAllow},
			{fileEv(policy.Deletes, "/srv/repo/build/e", "rmdir"), ActionAllow},
		}},
	}
	intents := append([]string{"RENAMES FILE:/srv/repo/build/**"}, repoIntents...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New(compile(t, manifest(t, "strict", "none", intents...)), policy.ModeStrict)
			for i, s := range tc.steps {
				v := e.Observe(s.ev)
				if v.Action != s.want {
					t.Fatalf("step %d %s (%s): %s, want %s", i, s.ev.Triple, s.ev.Syscall, v.Action, s.want)
				}
				if v.Action == ActionKill {
					return
				}
			}
		})
	}
}

func TestRecordsDedupAndUses(t *testing.T) {
	e := New(compile(t, manifest(t, "permissive", "system-ro", repoIntents...)), policy.ModePermissive, WithClock(fakeClock()))
	for range 3 {
		e.Observe(fileEv(policy.Consumes, "/srv/repo/a", "openat"))
	}
	ev := fileEv(policy.Consumes, "/srv/repo/a", "openat")
	ev.PID = 99
	e.Observe(ev)
	e.Observe(fileEv(policy.Consumes, "/etc/hosts", "openat"))
	e.Observe(blocked(fileEv(policy.Mutates, "/etc/passwd", "openat")))
	e.Observe(fileEv(policy.Mutates, "/etc/passwd", "openat"))
	r := e.Records()
	if len(r.Observed) != 3 {
		t.Fatalf("observed %d distinct triples, want 3: %+v", len(r.Observed), r.Observed)
	}
	a := r.Observed[0]
	if a.Triple.Path != "/srv/repo/a" || a.Count != 4 || a.PID != 42 || a.Comm != "agent" || !a.First.Equal(t0.Add(1e6)) {
		t.Errorf("first observation %+v", a)
	}
	if r.Intents[a.Intent].String() != "CONSUMES FILE:/srv/repo/**" {
		t.Errorf("allowed by %s", r.Intents[a.Intent])
	}
	pw := r.Observed[2]
	if pw.Count != 2 || pw.Blocked != 1 || !pw.Violation || r.Intents[pw.Intent].Origin != "lease" {
		t.Errorf("passwd observation %+v (intent %v)", pw, r.Intents[pw.Intent])
	}
	if r.Uses[0] != 4 {
		t.Errorf("uses[0]=%d, want 4", r.Uses[0])
	}
	if len(r.Amendments) != 1 || r.Amendments[0].Intent.String() != "MUTATES FILE:/etc/passwd" || r.Amendments[0].PID != 42 || !r.Amendments[0].Blocked {
		t.Errorf("amendments %+v", r.Amendments)
	}
	var unused []string
	for _, i := range r.Unused() {
		unused = append(unused, r.Intents[i].String())
	}
	want := "MUTATES FILE:/srv/repo/src/** PROVIDES FILE:/srv/repo/build/** CONSUMES NET:10.0.0.1:443/tcp PROVIDES PROC:/usr/bin/git DELETES FILE:/srv/repo/tmp/**"
	if got := strings.Join(unused, " "); got != want {
		t.Errorf("unused\n got %s\nwant %s", got, want)
	}
}

func TestConcurrentObserve(t *testing.T) {
	e := New(compile(t, manifest(t, "permissive", "system-ro", repoIntents...)), policy.ModePermissive)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				e.Observe(fileEv(policy.Consumes, "/srv/repo/f", "openat"))
				if i%50 == 0 {
					e.Observe(fileEv(policy.Mutates, "/opt/x"+string(rune('a'+g)), "openat"))
					e.Lost(event.Lost{Count: 1})
				}
			}
		}()
	}
	wg.Wait()
	r := e.Records()
	if r.Observed[0].Count != 4000 {
		t.Fatalf("count %d, want 4000", r.Observed[0].Count)
	}
	if len(r.Amendments) != 8 || r.LostTotal != 80 {
		t.Fatalf("amendments %d lost %d", len(r.Amendments), r.LostTotal)
	}
}

func TestActionText(t *testing.T) {
	for _, a := range []Action{ActionAllow, ActionBlocked, ActionKill, ActionAmended, ActionLeaseDenied} {
		b, _ := a.MarshalText()
		var back Action
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Fatalf("%s: %v %v", a, back, err)
		}
	}
	var x Action
	if err := x.UnmarshalText([]byte("nope")); err == nil {
		t.Fatal("want error")
	}
}

func TestExecCoversReadOfItsBinary(t *testing.T) {
	e := New(compile(t, manifest(t, "strict", "none", repoIntents...)), policy.ModeStrict)
	if v := e.Observe(execEv("/usr/bin/git")); v.Action != ActionAllow {
		t.Fatalf("exec of declared binary: %s (%s)", v.Action, v.Message())
	}
	// The implied read does not extend to other reads of other files.
	ev := execEv("/usr/bin/git")
	ev.Extra.Path = "/usr/bin/other"
	if v := e.Observe(ev); v.Action != ActionKill {
		t.Fatalf("mismatched Extra: %s, want kill", v.Action)
	}
	r := e.Records()
	if len(r.Observed) != 3 || r.Uses[4] != 3 {
		t.Fatalf("observed %d, git uses %d", len(r.Observed), r.Uses[4])
	}
}

// A backend's count of unreported repeats (event.Repeat) adds to the
// triple's count and to its intent's uses, as if each had been reported.
func TestObserveCountsRepeats(t *testing.T) {
	rs := compile(t, manifest(t, "strict", "none", "CONSUMES FILE:/w/**"))
	e := New(rs, policy.ModeStrict)
	ev := event.Event{Triple: policy.FileTriple(policy.Consumes, "/w/a"), Repeat: 4}
	if v := e.Observe(ev); v.Action != ActionAllow {
		t.Fatalf("verdict %+v", v)
	}
	r := e.Records()
	if len(r.Observed) != 1 || r.Observed[0].Count != 5 {
		t.Fatalf("observed %+v, want one triple counted 5 times", r.Observed)
	}
}

// TestRepeatedKeepsTheFirstVerdict: opens the kernel counted instead of
// reporting again count under their first report's verdict, whatever the
// session looks like when they are handed over at its end.
func TestRepeatedKeepsTheFirstVerdict(t *testing.T) {
	m := manifest(t, "strict", "none", "PROVIDES FILE:/srv/repo/build/**", "DELETES FILE:/srv/repo/build/**", "CONSUMES FILE:/srv/repo/src/**")
	out := "/srv/repo/build/out.o"
	write := fileEv(policy.Mutates, out, "openat")
	e := New(compile(t, m), policy.ModeStrict, WithClock(fakeClock()))
	for _, ev := range []event.Event{fileEv(policy.Provides, out, "openat"), write, fileEv(policy.Deletes, out, "unlinkat")} {
		if v := e.Observe(ev); v.Action != ActionAllow {
			t.Fatalf("%s: %v", ev.Triple, v.Action)
		}
	}
	// Two more writes were counted in the kernel (the record stands for
	// 1 + Repeat of them). The file is gone now, and judged again they
	// would be a violation: the verdict they had is "created".
	rep := write
	rep.Repeat = 1
	if v := e.Repeated(rep); v.Action != ActionAllow || !v.Created {
		t.Fatalf("repeat of a created file's write: %+v, want allowed as created", v)
	}
	if again := e.Observe(write); again.Action != ActionKill {
		t.Fatalf("a new write after the delete: %v, want a kill (the file is no longer the session's)", again.Action)
	}
	// A declared read: the repeats count as uses of the intent.
	e = New(compile(t, m), policy.ModeStrict, WithClock(fakeClock()))
	read := fileEv(policy.Consumes, "/srv/repo/src/a.go", "openat")
	e.Observe(read)
	read.Repeat = 4
	if v := e.Repeated(read); v.Action != ActionAllow || v.Intent == nil || v.Intent.String() != "CONSUMES FILE:/srv/repo/src/**" {
		t.Fatalf("repeat of a declared read: %+v", v)
	}
	r := e.Records()
	if len(r.Observed) != 1 || r.Observed[0].Count != 6 || r.Events != 6 {
		t.Fatalf("observed %+v events %d, want one triple counted 6 times", r.Observed, r.Events)
	}
	for i, in := range r.Intents {
		if in.String() == "CONSUMES FILE:/srv/repo/src/**" && r.Uses[i] != 6 {
			t.Fatalf("uses of %s = %d, want 6", in, r.Uses[i])
		}
	}
	// A repeat whose first report was never judged is decided.
	stray := fileEv(policy.Mutates, "/etc/hosts", "openat")
	if v := e.Repeated(stray); v.Action != ActionKill {
		t.Fatalf("a repeat with no first report: %v, want it decided (a kill)", v.Action)
	}
}
