//go:build linux

package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/cilium/ebpf/btf"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// The agent identity: nobody/nogroup. Every file the tests make for the
// agent is owned by it, so DAC always allows it and a refusal can only come
// from klock's walls.
const AgentUID, AgentGID = 65534, 65534

// ProbeEnv selects the probe mode of the test binary (see probe.go).
const ProbeEnv = "KLOCK_TEST_PROBE"

// Probe is a copy of the running test binary in a directory the agent can
// traverse (mode 0755). Run as the agent with ProbeEnv set, it performs the
// system calls named by its arguments and prints their exact outcome.
var Probe string

// shared holds the suite's kernel backends (nil when not root).
var shared *session.Shared

// Shared is the suite's kernel backends (session.Options.Backends) for a
// test that calls session.Run itself: nil when not root.
func Shared() *session.Shared { return shared }

// BackendEnv chooses the sessions' file backend: landlock when unset (so a
// suite's expectations do not depend on the machine), bpf-lsm in the VM
// harness, where nothing may silently fall back.
const BackendEnv = "KLOCK_TEST_BACKEND"

// Backend is the file backend every session of the suite runs with.
func Backend() session.Backend {
	if b := os.Getenv(BackendEnv); b != "" {
		return session.Backend(b)
	}
	return session.BackendLandlock
}

// LSM reports whether the suite runs on the bpf-lsm backend.
func LSM() bool { return Backend() == session.BackendLSM }

// FileWall is the wall that refuses the agent's undeclared file
// operations, as the log names it: bpf-lsm or landlock.
func FileWall() string {
	if LSM() {
		return "bpf-lsm"
	}
	return "landlock"
}

// Refusal is the errno the file wall answers with: EPERM from bpf-lsm,
// EACCES from Landlock.
func Refusal() string {
	if LSM() {
		return "EPERM"
	}
	return "EACCES"
}

// NetRefusal is the errno a connect to an undeclared TCP peer gets: EACCES
// from Landlock's TCP port rules (ABI 4+, with the Landlock wall), else
// EPERM from cgroup-net (bpf-lsm, or a kernel without them: 6.1).
func NetRefusal() string {
	if abi, err := launch.ProbeABI(); err == nil && abi >= 4 && !LSM() {
		return "EACCES"
	}
	return "EPERM"
}

// CtimeHooks reports whether the suite's observer names a path-based
// metadata change's inode (the ctime tracepoints, 6.13+, or the fentry
// programs that stand in for them before): observe.Observer's
// NamesMetadataInodes.
func CtimeHooks() bool {
	return shared != nil && shared.Observer != nil && shared.Observer.NamesMetadataInodes()
}

// CtimeTracepoints reports whether the kernel has the ctime tracepoints
// themselves (6.13+: its BTF has inode_set_ctime_to_ts). Before them the
// fentry fallback names the inode of a chmod by a name that still leads
// to it, but an object reached through a link swapped since is named by
// its superblock path only where that path can be checked: the rows that
// swap links expect the fail-closed outcome there.
func CtimeTracepoints() bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false
	}
	_, err = spec.AnyTypeByName("btf_trace_inode_set_ctime_to_ts")
	return err == nil
}

// Main is TestMain for the suites: launch.Init first (stage 2 of every
// session re-executes this binary), then the probe mode, then the tests.
func Main(m *testing.M, after ...func()) {
	stage2.ContainerInit() // World.Adopt's stage 2 inside the "container"
	launch.Init()
	if _, ok := os.LookupEnv(ProbeEnv); ok {
		os.Exit(RunProbe(os.Args[1:]))
	}
	var dir string
	if os.Geteuid() == 0 {
		// One set of kernel backends for every session of the suite, as
		// klockd keeps them (the verifier runs once, not per test).
		shared = session.LoadShared(observe.Options{})
		var err error
		if dir, err = copyProbe(); err != nil {
			fmt.Fprintln(os.Stderr, "harness: copy probe:", err)
			os.Exit(2)
		}
	}
	code := m.Run()
	for _, f := range after {
		f() // the suite's own clean-up (images it built)
	}
	if binDir != "" {
		os.RemoveAll(binDir) // KlockBins'
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
	if shared != nil {
		shared.Close()
	}
	os.Exit(code)
}

func copyProbe() (string, error) {
	dir, err := os.MkdirTemp("", "klock-test-probe-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return dir, err
	}
	Probe, err = testutil.CopySelf(dir, "probe")
	return dir, err
}

// Real returns p with every symlink resolved (the kernel-resolved path klock
// reports: on this host /bin/sh is /usr/bin/dash).
func Real(t testing.TB, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatalf("resolve %s: %v", p, err)
	}
	return r
}

// World is one test's file system: a workdir owned by the agent, and an
// outside directory (also owned by the agent, so only klock stands between
// them) that no manifest names.
type World struct {
	T       *testing.T
	Workdir string
	Outside string
}

// NewWorld makes the directories (parents chmod 0755 so the agent can
// traverse them). It skips (or fails, see testutil) when not root.
func NewWorld(t *testing.T) *World {
	t.Helper()
	testutil.RequirePrivileged(t)
	base := t.TempDir()
	for p := base; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := &World{T: t, Workdir: filepath.Join(base, "work"), Outside: filepath.Join(base, "outside")}
	w.Dir(w.Workdir)
	w.Dir(w.Outside)
	return w
}

// W joins path elements under the workdir.
func (w *World) W(rel ...string) string { return filepath.Join(append([]string{w.Workdir}, rel...)...) }

// O joins path elements under the outside directory.
func (w *World) O(rel ...string) string { return filepath.Join(append([]string{w.Outside}, rel...)...) }

// Dir makes a directory (and parents) owned by the agent, mode 0755.
func (w *World) Dir(p string) {
	w.T.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		w.T.Fatal(err)
	}
	if err := os.Chown(p, AgentUID, AgentGID); err != nil {
		w.T.Fatal(err)
	}
}

// File writes an agent-owned file (mode 0644), making its directory.
func (w *World) File(p, content string) {
	w.T.Helper()
	w.Dir(filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		w.T.Fatal(err)
	}
	if err := os.Chown(p, AgentUID, AgentGID); err != nil {
		w.T.Fatal(err)
	}
}

// Symlink makes an agent-owned symlink.
func (w *World) Symlink(target, p string) {
	w.T.Helper()
	if err := os.Symlink(target, p); err != nil {
		w.T.Fatal(err)
	}
	if err := os.Lchown(p, AgentUID, AgentGID); err != nil {
		w.T.Fatal(err)
	}
}

// Content reads a file; "<absent>" when it does not exist.
func (w *World) Content(p string) string {
	w.T.Helper()
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		w.T.Fatal(err)
	}
	return string(b)
}

// Exists reports whether p exists (without following a final symlink).
func (w *World) Exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// ManifestYAML is a complete manifest around intents.
func ManifestYAML(workdir string, mode policy.Mode, intents []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: klock/v1\nagent: {id: klock-e2e}\nmode: %s\nworkdir: %s\nbaseline: system-ro\nintents:\n", mode, workdir)
	for _, in := range intents {
		fmt.Fprintf(&b, "  - %s\n", in)
	}
	b.WriteString(`declared_tools: []
cost_envelope:
  expected_tokens_in: 100
  max_tokens_in: 200
  expected_tokens_out: 10
  max_tokens_out: 20
  expected_latency_ms: 10
  max_latency_ms: 20
  context_efficiency: 0.7
  expected_cost: "0.01 USD"
  max_cost: "0.02 USD"
`)
	return b.String()
}

// Spec is one session.
type Spec struct {
	Mode    policy.Mode // default strict
	Intents []string
	// Manifest, when set, is used as is instead of ManifestYAML(Intents).
	Manifest []byte
	Command  []string
	// Env is added to PATH and ProbeEnv.
	Env    []string
	Stdin  io.Reader
	Stdout io.Writer // default: captured in Outcome.Stdout
	ID     string
	// Timeout bounds the session (default 60s); hitting it is a failure.
	Timeout time.Duration
	// Backend overrides the suite's file backend (Backend()) for this run.
	Backend session.Backend
	// DNSUpstreams are session.Options.DNSUpstreams: the name server the
	// session's DNS proxy forwards to (a test's own).
	DNSUpstreams []string
	// Resolve is session.Options.Resolve (default: the system resolver).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Events is session.Options.Events (nil: none).
	Events eventlog.Sink
	// Stage2 is session.Options.Stage2 (a klock-stage2 built for the test).
	Stage2 string
	// WallNotEnforcing: the test expects a wall to let its canary through
	// (every other session must prove each of its walls).
	WallNotEnforcing bool
	// RecordAll is session.Options.RecordAll (klock run --record all).
	RecordAll bool
}

// Outcome is a finished session.
type Outcome struct {
	Res *session.Result
	// Log is the verification log read back from Res.LogPath.
	Log            *vlog.Log
	Stdout, Stderr string
	// Probe holds the probe's "step=outcome" lines.
	Probe map[string]string
	// ManifestPath is where the manifest was written.
	ManifestPath string
}

var seq atomic.Int64

// NewID returns a unique session id for a test.
func NewID() string {
	return fmt.Sprintf("t%d-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9, seq.Add(1))
}

// Run runs a real session through session.Run, with the pre-flight backup
// klock run takes (session.Backup: strict kills roll back), and reads its
// verification log back from disk. AllowDegraded is off: every backend
// must be present.
func (w *World) Run(s Spec) *Outcome {
	w.T.Helper()
	o, err := w.RunErr(s)
	if err != nil {
		w.T.Fatalf("session.Run: %v\nstderr:\n%s", err, o.Stderr)
	}
	return o
}

// RunErr is Run for a session that may refuse to start: session.Run's
// error is returned (with the Outcome's Stderr), not a test failure.
func (w *World) RunErr(s Spec) (*Outcome, error) {
	w.T.Helper()
	mode, m, data, mpath := w.manifest(s)
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errb bytes.Buffer
	stdout := s.Stdout
	if stdout == nil {
		stdout = &out
	}
	id := s.ID
	if id == "" {
		id = NewID()
	}
	backend := Backend()
	if s.Backend != "" {
		backend = s.Backend
	}
	res, err := session.Run(ctx, session.Options{
		Manifest: m, ManifestPath: mpath, ManifestData: data, Mode: mode, ID: id,
		Backends: shared, Backend: backend,
		Command: s.Command,
		Env:     append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", ProbeEnv + "=1"}, s.Env...),
		User:    &launch.Credential{UID: AgentUID, GID: AgentGID},
		Stdin:   s.Stdin, Stdout: stdout, Stderr: &errb,
		Snapshot:     session.Backup(nil),
		DNSUpstreams: s.DNSUpstreams, Resolve: s.Resolve, Events: s.Events,
		Stage2: s.Stage2, RecordAll: s.RecordAll,
	})
	if err != nil {
		return &Outcome{Stderr: errb.String()}, err
	}
	if ctx.Err() != nil {
		w.T.Fatalf("session hit the test timeout (%v): reason %q\nstdout:\n%s\nstderr:\n%s", timeout, res.Reason, out.String(), errb.String())
	}
	lg, err := vlog.Read(res.LogPath)
	if err != nil {
		w.T.Fatalf("read verification log: %v", err)
	}
	for _, b := range lg.Backends {
		if b.Guarantee == "unavailable" && b.Name != "pre-flight backup" {
			w.T.Fatalf("backend %s unavailable: %v", b.Name, b.Details)
		}
	}
	o := &Outcome{Res: res, Log: lg, Stdout: out.String(), Stderr: errb.String(), Probe: ParseProbe(out.String()), ManifestPath: mpath}
	w.checkCanaries(o, backend, s.WallNotEnforcing)
	return o, nil
}

func ParseProbe(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// Dump describes the outcome for failure messages.
func (o *Outcome) Dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "killed=%v exit=%v reason=%q\n", o.Res.Killed, o.Res.Exit, o.Res.Reason)
	for _, v := range o.Log.Violations {
		fmt.Fprintf(&b, "  violation %s blocked=%v action=%s syscall=%s comm=%s errno-source=%s\n", v.Triple, v.Blocked, v.Action, v.Syscall, v.Comm, v.Source)
	}
	for _, ob := range o.Log.Observed {
		if !strings.Contains(ob.Triple, "/usr/") && !strings.Contains(ob.Triple, "/etc/") {
			fmt.Fprintf(&b, "  observed %s count=%d blocked=%d failed=%d %s allowed-by=%q\n", ob.Triple, ob.Count, ob.Blocked, ob.Failed, ob.Syscall, ob.AllowedBy)
		}
	}
	fmt.Fprintf(&b, "stdout:\n%s\nstderr:\n%s", o.Stdout, o.Stderr)
	return b.String()
}

// Violation returns the logged violation of triple, or nil.
func (o *Outcome) Violation(triple string) *vlog.Violation {
	for i := range o.Log.Violations {
		if o.Log.Violations[i].Triple == triple {
			return &o.Log.Violations[i]
		}
	}
	return nil
}

// Observed returns the observed entry of triple, or nil.
func (o *Outcome) Observed(triple string) *vlog.Observed {
	for i := range o.Log.Observed {
		if o.Log.Observed[i].Triple == triple {
			return &o.Log.Observed[i]
		}
	}
	return nil
}

// Use returns the use count of a declared (non-baseline) intent.
func (o *Outcome) Use(intent string) (uint64, bool) {
	for _, u := range o.Log.Intents {
		if u.Intent == intent {
			return u.Uses, true
		}
	}
	return 0, false
}

// AssertKilledFor checks a strict kill for the violation triple: the
// session was killed, its first violation has exactly the ScopeViolationError
// text msg, the log holds the triple with its resolved path and the expected
// blocked flag, the log's exit says klock killed it, and its verdict is
// VIOLATION.
func (o *Outcome) AssertKilledFor(t testing.TB, triple, path, msg string, blocked bool) {
	t.Helper()
	if !o.Res.Killed {
		t.Fatalf("session not killed, want a kill for %s\n%s", triple, o.Dump())
	}
	if o.Res.Violation == nil || o.Res.Violation.Error() != msg {
		t.Errorf("Result.Violation = %v\nwant %s\n%s", o.Res.Violation, msg, o.Dump())
	}
	if o.Res.Reason != msg {
		t.Errorf("Result.Reason = %q, want %q", o.Res.Reason, msg)
	}
	o.AssertViolation(t, triple, path, blocked)
	if !o.Log.Exit.KilledByKlock || o.Log.Verdict != vlog.VerdictViolation {
		t.Errorf("log exit %+v verdict %q: want killed by klock, VIOLATION", o.Log.Exit, o.Log.Verdict)
	}
}

// AssertViolation checks the log holds triple as a violation with the
// resolved path and blocked flag (and the strict action).
func (o *Outcome) AssertViolation(t testing.TB, triple, path string, blocked bool) {
	t.Helper()
	v := o.Violation(triple)
	if v == nil {
		t.Fatalf("no violation %s in the log\n%s", triple, o.Dump())
	}
	if v.Path != path {
		t.Errorf("violation %s: path %q, want %q", triple, v.Path, path)
	}
	if v.Blocked != blocked {
		t.Errorf("violation %s: blocked=%v, want %v (blocked = the kernel refused it; else detected after the effect)\n%s", triple, v.Blocked, blocked, o.Dump())
	}
	want := "violation-kill"
	if o.Log.Mode == policy.ModePermissive {
		want = "amended"
		if blocked {
			want = "violation-blocked"
		}
	}
	if v.Action != want {
		t.Errorf("violation %s: action %q, want %q", triple, v.Action, want)
	}
	if v.Needed != triple {
		t.Errorf("violation %s: needed %q", triple, v.Needed)
	}
}

// AssertClean checks a session that did only declared things.
func (o *Outcome) AssertClean(t testing.TB, exit int) {
	t.Helper()
	if o.Res.Killed || o.Res.Violation != nil || len(o.Log.Violations) != 0 || o.Log.Verdict != vlog.VerdictClean {
		t.Fatalf("want CLEAN, got verdict %q\n%s", o.Log.Verdict, o.Dump())
	}
	if o.Res.Exit.ExitCode() != exit {
		t.Fatalf("exit %v, want %d\n%s", o.Res.Exit, exit, o.Dump())
	}
}

// AssertRestored checks a strict kill's rollback: every path in want has
// its pre-session content again ("<absent>" for a path the session
// created), and no rollback step failed.
func (w *World) AssertRestored(o *Outcome, want map[string]string) {
	w.T.Helper()
	if o.Res.Killed && len(want) > 0 && len(o.Log.Rollback) == 0 {
		w.T.Errorf("killed session with changed files has no rollback in its log")
	}
	for _, r := range o.Log.Rollback {
		if !r.OK {
			w.T.Errorf("rollback of %s failed: %s", r.Path, r.Error)
		}
	}
	for p, c := range want {
		if got := w.Content(p); got != c {
			w.T.Errorf("%s = %q after rollback, want %q", p, got, c)
		}
	}
}

// ProbeIntents declare the probe (a PROC intent also lets the binary be
// read, which the Go runtime does at start-up).
func ProbeIntents() []string {
	return []string{"PROVIDES PROC:" + Probe}
}

// Declared is what the session's manifest (with its baseline) declares on
// tr's object, as the ScopeViolationError prints it ("" for nothing).
// Messages use it where the "only declared" part depends on the baseline's
// contents rather than on the test.
func (o *Outcome) Declared(t testing.TB, tr policy.Triple) string {
	t.Helper()
	data, err := os.ReadFile(o.ManifestPath)
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.Parse(o.ManifestPath, data)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	d := rs.Allows(tr)
	if d.Allowed {
		t.Fatalf("%s is allowed by the manifest", tr)
	}
	if d.Declared == 0 {
		return ""
	}
	return d.Declared.String()
}

// manifest writes s's manifest beside the workdir and parses it.
func (w *World) manifest(s Spec) (mode policy.Mode, m *policy.Manifest, data []byte, path string) {
	w.T.Helper()
	mode = s.Mode
	if mode == "" {
		mode = policy.ModeStrict
	}
	data = s.Manifest
	if data == nil {
		data = []byte(ManifestYAML(w.Workdir, mode, s.Intents))
	}
	path = filepath.Join(filepath.Dir(w.Workdir), fmt.Sprintf("manifest-%d.yaml", seq.Add(1)))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		w.T.Fatal(err)
	}
	m, err := policy.Parse(path, data)
	if err != nil {
		w.T.Fatalf("parse manifest: %v\n%s", err, data)
	}
	return mode, m, data, path
}

// checkCanaries fails the test when a session that walls its agent did
// not prove its walls: no canary tried, or one let through unexpectedly.
func (w *World) checkCanaries(o *Outcome, backend session.Backend, notEnforcing bool) {
	w.T.Helper()
	if backend == session.BackendObserve {
		return
	}
	if len(o.Log.Canaries) == 0 {
		w.T.Fatalf("the session tried no canary: its walls were never proved\n%s", o.Dump())
	}
	for _, c := range o.Log.Canaries {
		switch {
		case !notEnforcing && c.NotEnforcing():
			w.T.Fatalf("a wall let its canary through: %s\n%s", c, o.Dump())
		case notEnforcing && c.Kind == "write" && !c.NotEnforcing():
			w.T.Fatalf("the test's broken file wall did not let its write canary through: %s\n%s", c, o.Dump())
		}
	}
}
