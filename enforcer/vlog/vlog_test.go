package vlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/klocklabs/klock/internal/testutil"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

const manifestYAML = `apiVersion: klock/v1
agent: {id: refactor-bot-01}
mode: strict
workdir: /srv/repo
baseline: system-ro
intents:
  - CONSUMES FILE:/srv/repo/**
  - MUTATES FILE:/srv/repo/src/**
  - PROVIDES FILE:/srv/repo/build/**
` + testutil.CostEnvelope

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func ev(p policy.Predicate, path string, ms int, blocked bool) event.Event {
	e := event.Event{Time: t0.Add(time.Duration(ms) * time.Millisecond), Triple: policy.FileTriple(p, path), PID: 42, Comm: "sed", Syscall: "openat", Source: event.SourceTracepoint}
	if blocked {
		e.Blocked, e.Errno, e.Source = true, 13, event.SourceLandlock
	}
	return e
}

// failedEv is ev that the kernel failed with errno e (not a wall's refusal).
func failedEv(p policy.Predicate, path string, ms int, e syscall.Errno) event.Event {
	x := ev(p, path, ms, false)
	x.Syscall, x.Errno = "renameat2", int32(e)
	return x
}

var backends = []Backend{
	{Name: "landlock", Guarantee: GuaranteeBlocks, Details: []string{"Landlock ABI 4"}},
	{Name: "tracepoints", Guarantee: GuaranteeDetects},
}

// compiled is manifestYAML, parsed and compiled.
func compiled(tb testing.TB) (*policy.Manifest, *policy.Ruleset) {
	tb.Helper()
	m, err := policy.Parse("agent.yaml", []byte(manifestYAML))
	if err != nil {
		tb.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		tb.Fatal(err)
	}
	return m, rs
}

// session runs events through an engine and builds the log.
func session(t *testing.T, mode policy.Mode, evs []event.Event, lost uint64, exit Exit, rollback []RollbackOp) *Log {
	t.Helper()
	m, rs := compiled(t)
	e := decide.New(rs, mode)
	for _, x := range evs {
		e.Observe(x)
	}
	if lost > 0 {
		e.Lost(event.Lost{Time: t0.Add(time.Second), Count: lost})
	}
	l := New(Session{ID: "s-1", Agent: m.Agent.ID, ManifestPath: "/srv/repo/agent.yaml", ManifestBytes: []byte(manifestYAML), Mode: mode, Start: t0, Backends: backends})
	l.AddRecords(e.Records())
	l.Finish(t0.Add(4*time.Second), exit, rollback)
	return l
}

func TestHeadline(t *testing.T) {
	killed := Exit{Signal: "SIGKILL", KilledByKlock: true}
	ok := Exit{Code: ExitCode(0)}
	restored := []RollbackOp{{Path: "/srv/repo/src/a.go", Action: RollbackRestored, OK: true}, {Path: "/srv/repo/build/x", Action: RollbackRemoved, OK: true}, {Path: "/etc/y", Action: RollbackRecreated, OK: true}}
	tests := []struct {
		name    string
		mode    policy.Mode
		evs     []event.Event
		lost    uint64
		exit    Exit
		rb      []RollbackOp
		verdict string
		summary string
	}{
		{"clean", policy.ModeStrict, []event.Event{ev(policy.Consumes, "/srv/repo/a", 1, false)}, 0, ok, nil,
			VerdictClean, "CLEAN"},
		{"strict blocked and killed with restore", policy.ModeStrict, []event.Event{
			ev(policy.Mutates, "/srv/repo/src/a.go", 1, false),
			ev(policy.Mutates, "/etc/hosts", 2, true)}, 0, killed, restored,
			VerdictViolation, "VIOLATION (blocked, killed, 3 files restored)"},
		{"strict detected", policy.ModeStrict, []event.Event{ev(policy.Mutates, "/etc/hosts", 2, false)}, 0, killed,
			[]RollbackOp{{Path: "/etc/hosts", Action: RollbackRestored, OK: false, Error: "EROFS"}},
			VerdictViolation, "VIOLATION (detected after the effect, killed, 1 ROLLBACK FAILURES)"},
		// A rename the kernel failed (EXDEV: across file systems, or
		// Landlock's REFER) changed nothing: it is neither blocked by a
		// wall nor detected after an effect.
		{"strict failed without effect", policy.ModeStrict, []event.Event{failedEv(policy.Renames, "/etc/hosts", 2, unix.EXDEV)}, 0, killed, nil,
			VerdictViolation, "VIOLATION (failed in the kernel without effect (EXDEV), killed)"},
		{"a connect under way took effect", policy.ModeStrict, []event.Event{failedEv(policy.Mutates, "/etc/hosts", 2, unix.EINPROGRESS)}, 0, killed, nil,
			VerdictViolation, "VIOLATION (detected after the effect, killed)"},
		{"permissive amended", policy.ModePermissive, []event.Event{
			ev(policy.Mutates, "/etc/hosts", 2, false), ev(policy.Mutates, "/etc/hosts", 3, false),
			ev(policy.Consumes, "/opt/x", 4, true)}, 0, ok, nil,
			VerdictAmended, "AMENDED (2 leases, 1 blocked by the kernel)"},
		{"strict lost events", policy.ModeStrict, []event.Event{ev(policy.Consumes, "/srv/repo/a", 1, false)}, 7, killed, nil,
			VerdictKilled, "KILLED (7 kernel events lost, fail closed)"},
		{"permissive lost events", policy.ModePermissive, nil, 2, ok, nil,
			VerdictClean, "CLEAN (2 kernel events lost: log incomplete)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := session(t, tc.mode, tc.evs, tc.lost, tc.exit, tc.rb)
			if l.Verdict != tc.verdict || l.Summary != tc.summary {
				t.Fatalf("headline %q / %q, want %q / %q", l.Verdict, l.Summary, tc.verdict, tc.summary)
			}
			var buf bytes.Buffer
			if err := Render(&buf, l, RenderOptions{}); err != nil {
				t.Fatal(err)
			}
			if first, _, _ := strings.Cut(buf.String(), "\n"); first != tc.summary {
				t.Fatalf("render starts with %q, want %q\n%s", first, tc.summary, buf.String())
			}
		})
	}
}

func TestRenderKeyLines(t *testing.T) {
	l := session(t, policy.ModeStrict, []event.Event{
		ev(policy.Consumes, "/srv/repo/a", 1, false),
		ev(policy.Consumes, "/srv/repo/a", 2, false),
		ev(policy.Consumes, "/etc/hosts", 3, false),
		ev(policy.Mutates, "/etc/hosts", 4, true),
	}, 0, Exit{Signal: "SIGKILL", KilledByKlock: true}, []RollbackOp{{Path: "/srv/repo/build/x", Action: RollbackRemoved, OK: true}})
	var buf bytes.Buffer
	if err := Render(&buf, l, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"VIOLATION (blocked, killed, 1 file restored)\n  ScopeViolationError: Agent attempted MUTATES on /etc/hosts but only declared CONSUMES\n",
		"session   s-1 (agent refactor-bot-01, strict mode)",
		"exit      killed by klock (signal SIGKILL)",
		"manifest  /srv/repo/agent.yaml (sha256 " + HashManifest([]byte(manifestYAML))[:16] + "…)",
		"  landlock     blocks before the effect  Landlock ABI 4",
		"  tracepoints  detects, kills and rolls back",
		"03:04:05.004  MUTATES FILE:/etc/hosts  pid 42 sed  blocked by the kernel → violation-kill",
		"would have been allowed by: MUTATES FILE:/etc/hosts",
		"  removed   /srv/repo/build/x",
		"         2  CONSUMES FILE:/srv/repo/**\n",
		"         0  MUTATES FILE:/srv/repo/src/**  (never used)",
		"baseline system-ro: 1 of ",
		"Under-utilization (declared, never used; not a violation): 2\n  MUTATES FILE:/srv/repo/src/**\n  PROVIDES FILE:/srv/repo/build/**\n",
		"MUTATES FILE:/etc/hosts  VIOLATION [1 blocked]",
		"CONSUMES FILE:/srv/repo/a  ← CONSUMES FILE:/srv/repo/**",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q", want)
		}
	}
	if strings.Contains(out, "Amendments") || strings.Contains(out, "Lost events") {
		t.Errorf("empty sections rendered:\n%s", out)
	}
	if t.Failed() {
		t.Log("\n" + out)
	}
	// How long the agent ran on after the violation; nothing when it had
	// exited on its own before the kill.
	l.Exit.KilledAt = l.Violations[0].Time.Add(1500 * time.Microsecond)
	if got := killLatency(l); got != "; killed 1.5ms after the violation" {
		t.Errorf("kill latency rendered %q", got)
	}
	exited := *l
	code0 := 0
	exited.Exit.Signal, exited.Exit.Code = "", &code0
	if got := killLatency(&exited); got != "" {
		t.Errorf("kill latency of an agent that had exited: %q, want none", got)
	}
	// A violation read after the agent had exited on its own: the kill
	// found no process, and the exit line says so instead of "killed".
	code := 0
	if got := (Exit{Code: &code, KilledByKlock: true}).Text(); got != "exit code 0, then ended by klock: it read the violation after the agent had exited" {
		t.Errorf("late kill rendered %q", got)
	}
}

func TestObservedDedupInLog(t *testing.T) {
	evs := []event.Event{ev(policy.Consumes, "/srv/repo/a", 5, false), ev(policy.Consumes, "/srv/repo/a", 6, false), ev(policy.Consumes, "/srv/repo/b", 7, false)}
	evs[1].PID, evs[1].Comm = 7, "other"
	l := session(t, policy.ModeStrict, evs, 0, Exit{Code: ExitCode(0)}, nil)
	if len(l.Observed) != 2 {
		t.Fatalf("observed %+v", l.Observed)
	}
	a := l.Observed[0]
	if a.Triple != "CONSUMES FILE:/srv/repo/a" || a.Count != 2 || a.PID != 42 || a.Comm != "sed" || !a.First.Equal(t0.Add(5*time.Millisecond)) || a.AllowedBy != "CONSUMES FILE:/srv/repo/**" {
		t.Fatalf("observation %+v", a)
	}
	if l.Intents[0].Uses != 3 || l.Events != 3 {
		t.Fatalf("uses %d events %d", l.Intents[0].Uses, l.Events)
	}
}

func TestPermissiveLeasesInLog(t *testing.T) {
	l := session(t, policy.ModePermissive, []event.Event{ev(policy.Mutates, "/etc/hosts", 1, false), ev(policy.Mutates, "/etc/hosts", 2, false)}, 0, Exit{Code: ExitCode(0)}, nil)
	if len(l.Amendments) != 1 || l.Amendments[0].Intent != "MUTATES FILE:/etc/hosts" {
		t.Fatalf("amendments %+v", l.Amendments)
	}
	last := l.Intents[len(l.Intents)-1]
	if last.Origin != "lease" || last.Uses != 2 {
		t.Fatalf("lease intent %+v", last)
	}
	if len(l.Violations) != 1 || l.Violations[0].Action != "amended" || l.Violations[0].Lease != "MUTATES FILE:/etc/hosts" || l.Violations[0].Path != "/etc/hosts" {
		t.Fatalf("violations %+v", l.Violations)
	}
	for _, b := range l.Baseline {
		if !strings.HasPrefix(b.Origin, "baseline:") {
			t.Fatalf("baseline group holds %+v", b)
		}
	}
	for _, in := range l.Intents {
		if strings.HasPrefix(in.Origin, "baseline:") {
			t.Fatalf("intents hold baseline %+v", in)
		}
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	l := session(t, policy.ModeStrict, []event.Event{ev(policy.Mutates, "/etc/hosts", 2, true)}, 1, Exit{Signal: "SIGKILL", KilledByKlock: true},
		[]RollbackOp{{Path: "/srv/repo/src/a.go", Action: RollbackRestored, OK: true}})
	dir := filepath.Join(t.TempDir(), ".klock", "sessions", "s-1")
	p, err := l.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p != filepath.Join(dir, FileName) {
		t.Fatalf("path %s", p)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stat %v %v", st, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".verification-*")); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
	back, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(l), normalize(back)) {
		t.Fatalf("round trip differs:\n%+v\n%+v", l, back)
	}
	if back.Schema != Schema || back.Manifest.SHA256 != HashManifest([]byte(manifestYAML)) {
		t.Fatalf("schema %q sha %q", back.Schema, back.Manifest.SHA256)
	}
	// --json is the file itself.
	var buf bytes.Buffer
	if err := Render(&buf, back, RenderOptions{JSON: true}); err != nil {
		t.Fatal(err)
	}
	file, _ := os.ReadFile(p)
	if !bytes.Equal(buf.Bytes(), file) {
		t.Fatalf("--json differs from the file")
	}
	var raw map[string]any
	if err := json.Unmarshal(file, &raw); err != nil || raw["schema"] != "klock.verification/v1" {
		t.Fatalf("schema field: %v %v", raw["schema"], err)
	}
	// Overwrite is atomic and replaces.
	l.Session = "s-2"
	if _, err := l.Write(dir); err != nil {
		t.Fatal(err)
	}
	if again, _ := Read(p); again.Session != "s-2" {
		t.Fatalf("overwrite: %s", again.Session)
	}
}

// normalize makes times comparable after a JSON round trip.
func normalize(l *Log) *Log {
	b, _ := json.Marshal(l)
	var c Log
	_ = json.Unmarshal(b, &c)
	return &c
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.json")
	os.WriteFile(other, []byte(`{"schema":"klock.verification/v0"}`), 0o600)
	if _, err := Read(other); !errors.Is(err, ErrSchema) {
		t.Fatalf("want ErrSchema, got %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{`), 0o600)
	if _, err := Read(bad); err == nil || errors.Is(err, ErrSchema) {
		t.Fatalf("want a JSON error, got %v", err)
	}
	if _, err := Read(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("want ErrNotExist, got %v", err)
	}
}

func TestWriteFailsCleanly(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o600)
	l := New(Session{ID: "s"})
	if _, err := l.Write(filepath.Join(blocker, "sub")); err == nil {
		t.Fatal("want an error writing under a file")
	}
}

func TestRenderLimitsObserved(t *testing.T) {
	var evs []event.Event
	for i := range 30 {
		evs = append(evs, ev(policy.Consumes, "/srv/repo/f"+strings.Repeat("x", i), i, false))
	}
	l := session(t, policy.ModePermissive, evs, 0, Exit{Code: ExitCode(0)}, nil)
	var buf bytes.Buffer
	Render(&buf, l, RenderOptions{MaxObserved: 5})
	if !strings.Contains(buf.String(), "… 25 more (klock log -v lists them)") {
		t.Fatalf("no truncation line:\n%s", buf.String())
	}
}

func TestRenderShowsTheManifestsTriplesBeforeTheBaselines(t *testing.T) {
	var evs []event.Event
	// Each library read 50 times, as every program start does, and the
	// agent's own files once each.
	for i := range 20 {
		for range 50 {
			evs = append(evs, ev(policy.Consumes, fmt.Sprintf("/usr/lib/lib%d.so", i), 1, false))
		}
	}
	evs = append(evs, ev(policy.Consumes, "/srv/repo/a", 2, false), ev(policy.Consumes, "/srv/repo/b", 3, false))
	l := session(t, policy.ModeStrict, evs, 0, Exit{Code: ExitCode(0)}, nil)
	var buf bytes.Buffer
	if err := Render(&buf, l, RenderOptions{MaxObserved: 5}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	a, lib := strings.Index(out, "CONSUMES FILE:/srv/repo/a"), strings.Index(out, "CONSUMES FILE:/usr/lib/lib")
	if a < 0 || lib < 0 || a > lib {
		t.Fatalf("the agent's own triple is not listed before the baseline's:\n%s", out)
	}
	if !strings.Contains(out, "… 17 more, all allowed by the baseline (klock log -v lists them)") {
		t.Fatalf("no line saying what was left out:\n%s", out)
	}
	for _, o := range l.Observed {
		if o.Baseline != strings.HasPrefix(o.Triple, "CONSUMES FILE:/usr/lib/") {
			t.Fatalf("%s: baseline %v", o.Triple, o.Baseline)
		}
	}
	buf.Reset()
	if err := Render(&buf, l, RenderOptions{Verbose: true}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(buf.String(), "CONSUMES FILE:/usr/lib/lib"); got != 20 {
		t.Fatalf("-v lists %d of the 20 baseline triples:\n%s", got, buf.String())
	}
}

// TestIncompleteLog: the log a session writes when it starts says it has
// no end, whose klock ran it and how to undo it, survives a write and a
// read, and is replaced by Finish's verdict.
func TestIncompleteLog(t *testing.T) {
	l := New(Session{ID: "s-9", Agent: "a", Mode: policy.ModeStrict, Start: t0})
	l.Begin(4242)
	dir := t.TempDir()
	if _, err := l.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Incomplete() || back.Verdict != VerdictIncomplete {
		t.Fatalf("read back: incomplete %v, verdict %q", back.Incomplete(), back.Verdict)
	}
	var buf bytes.Buffer
	if err := Render(&buf, back, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"INCOMPLETE (no end recorded", "klock (pid 4242)", "klock rollback -m MANIFEST s-9", "→ (no end recorded)", "exit      not recorded"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Backends") {
		t.Errorf("an incomplete log lists sections it has nothing for:\n%s", out)
	}
	back.Finish(t0.Add(time.Second), Exit{Code: ExitCode(0)}, nil)
	if back.Incomplete() || back.Verdict != VerdictClean {
		t.Fatalf("after Finish: incomplete %v, verdict %q", back.Incomplete(), back.Verdict)
	}
}

// TestRenderMarksFailedAttempts: an attempt that failed on its own (no
// such file) is listed, and marked as having done nothing.
func TestRenderMarksFailedAttempts(t *testing.T) {
	miss := ev(policy.Consumes, "/srv/repo/missing", 1, false)
	miss.Errno = 2
	l := session(t, policy.ModeStrict, []event.Event{miss, ev(policy.Consumes, "/srv/repo/a", 2, false)}, 0, Exit{Code: ExitCode(0)}, nil)
	var buf bytes.Buffer
	if err := Render(&buf, l, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.Contains(line, "/srv/repo/missing") && !strings.HasSuffix(line, "[1 failed]"):
			t.Errorf("the failed read is not marked: %q", line)
		case strings.Contains(line, "FILE:/srv/repo/a ") && strings.Contains(line, "failed"):
			t.Errorf("a read that worked is marked failed: %q", line)
		}
	}
}

// TestDNSProxyRefusalIsTheProxys: a name the session's DNS proxy refused
// (over TCP) and an answer's address it withheld are rendered as the
// proxy's refusals, with what was asked, not as a kernel's block by pid 0;
// the headline counts them apart.
func TestDNSProxyRefusalIsTheProxys(t *testing.T) {
	dnsEv := func(ms int, tr policy.Triple, what string) event.Event {
		return event.Event{Time: t0.Add(time.Duration(ms) * time.Millisecond), Source: event.SourceDNSProxy, Blocked: true, Triple: tr, Syscall: what}
	}
	refused := dnsEv(5, policy.Triple{Predicate: policy.Consumes, Type: policy.ObjNet, Host: "evil.example", Addr: netip.AddrPortFrom(netip.Addr{}, 53), Proto: policy.ProtoTCP},
		"dns query A (refused: no NET intent declares this name)")
	withheld := dnsEv(6, policy.NetTriple(policy.Consumes, netip.MustParseAddrPort("10.203.75.25:443"), policy.ProtoTCP),
		"dns answer A gw.example.test over udp: 10.203.75.25 withheld (rebinding: private address (RFC 1918))")
	l := session(t, policy.ModePermissive, []event.Event{refused, withheld, ev(policy.Consumes, "/opt/x", 4, true)}, 0, Exit{}, nil)
	if want := "AMENDED (3 leases, 1 blocked by the kernel, 2 refused by the DNS proxy)"; l.Summary != want {
		t.Errorf("summary %q, want %q", l.Summary, want)
	}
	var buf bytes.Buffer
	if err := Render(&buf, l, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"CONSUMES NET:evil.example:53/tcp  refused by the session's DNS proxy → ",
		"      dns query A (refused: no NET intent declares this name)\n",
		"CONSUMES NET:10.203.75.25:443/tcp  refused by the session's DNS proxy → ",
		"10.203.75.25 withheld (rebinding: private address (RFC 1918))",
		"+ CONSUMES NET:10.203.75.25:443/tcp  (the session's DNS proxy still refused it)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q\n%s", want, out)
		}
	}
	if strings.Contains(out, "pid 0 ") {
		t.Errorf("a DNS refusal rendered as a process's:\n%s", out)
	}
}
