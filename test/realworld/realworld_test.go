//go:build linux

package realworld

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
)

// The agent: nobody/nogroup owns every workdir, so `klock run` runs the
// agent as nobody (the owner of the workdir) and DAC never refuses it
// anything there: a refusal can only come from klock.
const agentUID, agentGID = 65534, 65534

const (
	binEnv  = "KLOCK_BIN"
	rootEnv = "KLOCK_REALWORLD_ROOT"
	keepEnv = "KLOCK_REALWORLD_KEEP"
	// diagnoseEnv=0: no permissive rerun of a failed strict step.
	diagnoseEnv = "KLOCK_REALWORLD_DIAGNOSE"
)

// stepTimeout bounds one `klock run`; a hung agent fails its step, not the
// whole package.
const stepTimeout = 4 * time.Minute

var (
	buildOnce sync.Once
	buildDir  string
	klockPath string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// rootBase is where the suite makes its directories: $KLOCK_REALWORLD_ROOT,
// else /srv (a workdir where real ones live; not /tmp or /var/tmp, which
// the agents use as scratch space and the learner treats specially).
func rootBase() string {
	dir := os.Getenv(rootEnv)
	if dir == "" {
		dir = "/srv"
	}
	os.MkdirAll(dir, 0o755)
	return dir
}

// klockBin is the klock under test: $KLOCK_BIN, else klock (and its stage 2
// launcher) built from this tree once for the package, so a stale bin/klock
// is never what is tested.
func klockBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(binEnv); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	if _, err := exec.LookPath("go"); err != nil {
		testutil.Unavailable(t, "no go toolchain to build klock (or set "+binEnv+")")
	}
	buildOnce.Do(func() {
		// Not in /tmp: the agents' learned /tmp/** scope is backed up.
		if buildDir, buildErr = os.MkdirTemp(rootBase(), "klock-realworld-bin-"); buildErr != nil {
			return
		}
		if buildErr = os.Chmod(buildDir, 0o755); buildErr != nil {
			return
		}
		if _, buildErr = testutil.Build(buildDir, "klock-stage2"); buildErr != nil {
			return
		}
		klockPath, buildErr = testutil.Build(buildDir, "klock")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return klockPath
}

// baseManifest is what a new user writes following the README: the agent's
// id and its workdir, and nothing about what the tool does (that is what
// --learn is for). klock validate rejects a manifest without a cost
// envelope (TestREADMEBaseManifest), so it carries the smallest valid one.
func baseManifest(agent, workdir string) string {
	return fmt.Sprintf("apiVersion: klock/v1\nagent: {id: %s}\nworkdir: %s\n", agent, workdir) + testutil.CostEnvelope
}

// world is one workload's directories: root/<workload>/work is the workdir
// (made afresh, at the same path, for every step: the learned manifest names
// it), each step's workdir is moved to root/<workload>/<step>.workdir after
// the step, and the manifests and klock's outputs sit beside them.
type world struct {
	t     *testing.T
	klock string
	dir   string // root/<workload>
	work  string // the workdir
	in    string // inputs the test prepared (tarballs, caches), outside the workdir
}

func newWorld(t *testing.T, root, name string) *world {
	t.Helper()
	dir := filepath.Join(root, name)
	w := &world{t: t, klock: klockBin(t), dir: dir, work: filepath.Join(dir, "work"), in: filepath.Join(dir, "inputs")}
	for _, d := range []string{dir, w.in} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// W joins path elements under the workdir.
func (w *world) W(rel ...string) string { return filepath.Join(append([]string{w.work}, rel...)...) }

// fresh makes an empty workdir owned by the agent, with the agent's home
// (HOME, as docs/cli.md suggests for tools that keep a cache: -e
// HOME=<workdir>/home) in it.
func (w *world) fresh() {
	w.t.Helper()
	if _, err := os.Lstat(w.work); err == nil {
		w.t.Fatalf("workdir %s already exists", w.work)
	}
	w.mkdir(w.work)
	w.mkdir(w.W("home"))
}

// retire moves the workdir aside as <step>.workdir, for inspection.
func (w *world) retire(step string) {
	w.t.Helper()
	if _, err := os.Lstat(w.work); err != nil {
		return // retired already
	}
	dst := filepath.Join(w.dir, step+".workdir")
	os.RemoveAll(dst)
	if err := os.Rename(w.work, dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.t.Fatal(err)
	}
}

func (w *world) mkdir(p string) {
	w.t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		w.t.Fatal(err)
	}
	// MkdirAll may have made parents below the workdir too.
	for d := p; strings.HasPrefix(d, w.work); d = filepath.Dir(d) {
		if err := os.Chown(d, agentUID, agentGID); err != nil {
			w.t.Fatal(err)
		}
	}
}

// file writes an agent-owned file under the workdir (rel), making its
// directories.
func (w *world) file(rel, content string, mode os.FileMode) {
	w.t.Helper()
	p := w.W(rel)
	w.mkdir(filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Chown(p, agentUID, agentGID); err != nil {
		w.t.Fatal(err)
	}
}

// copyIn copies src (a file or a tree) to rel under the workdir, owned by
// the agent.
func (w *world) copyIn(src, rel string) {
	w.t.Helper()
	dst := w.W(rel)
	w.mkdir(filepath.Dir(dst))
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		w.t.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", agentUID, agentGID), dst).CombinedOutput(); err != nil {
		w.t.Fatalf("chown %s: %v\n%s", dst, err, out)
	}
}

// asAgent runs a command outside klock as the agent user (to prepare
// inputs: a warm cache the agent will own), failing the test when it fails.
func asAgent(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: agentUID, Gid: agentGID}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("preparing inputs: %s %s (as uid %d, in %s): %v\n%s", name, strings.Join(args, " "), agentUID, dir, err, out)
	}
	return string(out)
}

// chownTree gives a tree the test made to the agent.
func chownTree(t *testing.T, p string) {
	t.Helper()
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", agentUID, agentGID), p).CombinedOutput(); err != nil {
		t.Fatalf("chown %s: %v\n%s", p, err, out)
	}
}

// run is one `klock run` of a step.
type run struct {
	step     string
	args     []string
	exit     int
	err      error // a failure to run klock at all, or the timeout
	dur      time.Duration
	stdout   string // the agent's
	stderr   string // the agent's and klock's (summary, learned-manifest notice)
	log      *vlog.Log
	logPath  string
	logErr   error
	manifest string // the manifest this run used
	work     string // the workdir
}

// klockRun runs klock with args in the workdir and reads back the session's
// verification log (the only session of this fresh workdir).
func (w *world) klockRun(step, manifest string, args ...string) *run {
	w.t.Helper()
	r := &run{step: step, args: args, manifest: manifest, work: w.work}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.klock, args...)
	cmd.Dir = w.work
	// klock's own environment: the test's, minus what would change klock's
	// behaviour from run to run (a klockd of another engineer).
	cmd.Env = append(os.Environ(), "KLOCK_SOCKET="+filepath.Join(w.dir, "no-klockd.sock"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r.dur = time.Since(start)
	r.stdout, r.stderr = out.String(), errb.String()
	os.WriteFile(filepath.Join(w.dir, step+".stdout"), out.Bytes(), 0o644)
	os.WriteFile(filepath.Join(w.dir, step+".stderr"), errb.Bytes(), 0o644)
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.exit, r.err = -1, fmt.Errorf("klock run did not end within %s (killed)", stepTimeout)
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	case err != nil:
		r.exit, r.err = -1, err
	}
	logs, _ := filepath.Glob(w.W(".klock", "sessions", "*", vlog.FileName))
	sort.Strings(logs) // session ids start with the time
	if len(logs) == 0 {
		r.logErr = fmt.Errorf("no verification log under %s", w.W(".klock", "sessions"))
	} else {
		r.logPath = logs[len(logs)-1]
		r.log, r.logErr = vlog.Read(r.logPath)
	}
	return r
}

// exitMeaning explains klock run's own exit statuses (docs/cli.md, "Exit status").
func exitMeaning(code int) string {
	switch code {
	case 0:
		return "ok"
	case 113:
		return "113: strict mode killed the session"
	case 125:
		return "125: klock refused or failed to start the session"
	case 130:
		return "130: ended from outside"
	case -1:
		return "klock did not run to its end"
	}
	return fmt.Sprintf("%d: the agent's own exit status", code)
}

// headline is one line about a run for -v output.
func (r *run) headline() string {
	s := fmt.Sprintf("%s: exit %s in %s", r.step, exitMeaning(r.exit), r.dur.Round(10*time.Millisecond))
	if r.log != nil {
		s += fmt.Sprintf("; verdict %s; %d events, %d distinct triples, %d violations, %d lost", r.log.Summary, r.log.Events, len(r.log.Observed), len(r.log.Violations), r.log.Lost.Total)
	}
	s += fmt.Sprintf("; pre-flight backup %.1f MB", float64(r.backupSize())/(1<<20))
	return s
}

// refusedDeclared are the observed operations the wall refused (EACCES or
// EPERM) although an intent the manifest declares allows them: klock said
// yes and the kernel said no. Baseline-allowed refusals are
// left out (DAC refuses nobody plenty of system files).
func (r *run) refusedDeclared() []vlog.Observed {
	if r.log == nil {
		return nil
	}
	var out []vlog.Observed
	for _, o := range r.log.Observed {
		if o.Blocked > 0 && o.AllowedBy != "" && !o.Baseline {
			out = append(out, o)
		}
	}
	return out
}

// problems are the reasons a strict run is not a pass as far as klock is
// concerned (the workload's own check comes on top): each one precise
// enough to say what broke.
func (r *run) problems() []string {
	var p []string
	if r.err != nil {
		p = append(p, r.err.Error())
	}
	if r.exit != 0 {
		p = append(p, "klock run exited "+exitMeaning(r.exit))
	}
	if r.logErr != nil {
		p = append(p, r.logErr.Error())
		return p
	}
	l := r.log
	if l.Verdict != vlog.VerdictClean {
		p = append(p, fmt.Sprintf("verdict %s, want CLEAN", l.Summary))
	}
	if l.Exit.KilledByKlock {
		p = append(p, fmt.Sprintf("killed by klock: %s", l.Exit.Reason))
	}
	// The same violation repeated (pytest truncates its capture file per
	// test) is one line with a count.
	var order []string
	seen := map[string]int{}
	for _, v := range l.Violations {
		line := fmt.Sprintf("violation: %s (%s; action %s, blocked=%v; %s pid %d %s via %s; declared there: %q; would need: %q)",
			v.Triple, v.Error, v.Action, v.Blocked, v.Comm, v.PID, v.Syscall, v.Source, v.Declared, v.Needed)
		if seen[line] == 0 {
			order = append(order, line)
		}
		seen[line]++
	}
	for _, line := range order {
		if n := seen[line]; n > 1 {
			line += fmt.Sprintf(" ×%d", n)
		}
		p = append(p, line)
	}
	for _, o := range r.refusedDeclared() {
		p = append(p, fmt.Sprintf("refused by the wall although declared: %s ← %s [%d of %d blocked; %s pid %d %s]",
			o.Triple, o.AllowedBy, o.Blocked, o.Count, o.Comm, o.PID, o.Syscall))
	}
	if l.Lost.Total > 0 {
		p = append(p, fmt.Sprintf("%d kernel events lost", l.Lost.Total))
	}
	if rb := r.rollbackSummary(); rb != "" {
		p = append(p, rb)
	}
	return p
}

// rollbackSummary says what the strict kill's rollback did: counts per
// action, every path outside the workdir (a rollback must touch
// only what the agent could change) and the first few inside it.
func (r *run) rollbackSummary() string {
	if r.log == nil || len(r.log.Rollback) == 0 {
		return ""
	}
	count := map[string]int{}
	var outside, inside, failed []string
	for _, op := range r.log.Rollback {
		count[op.Action]++
		desc := op.Action + " " + op.Path
		switch {
		case !op.OK:
			failed = append(failed, desc+": "+op.Error)
		case op.Path != r.workdir() && !strings.HasPrefix(op.Path, r.workdir()+"/"):
			outside = append(outside, desc)
		default:
			inside = append(inside, desc)
		}
	}
	var acts []string
	for a, n := range count {
		acts = append(acts, fmt.Sprintf("%d %s", n, a))
	}
	sort.Strings(acts)
	s := fmt.Sprintf("rollback: %s", strings.Join(acts, ", "))
	if len(failed) > 0 {
		s += "; FAILED: " + strings.Join(failed, "; ")
	}
	if len(outside) > 0 {
		s += "; outside the workdir: " + strings.Join(outside, ", ")
	}
	if len(inside) > 6 {
		inside = append(inside[:6], fmt.Sprintf("... %d more", len(inside)-6))
	}
	if len(inside) > 0 {
		s += "; in the workdir: " + strings.Join(inside, ", ")
	}
	return s
}

// workdir is the session's workdir.
func (r *run) workdir() string { return r.work }

// klockMade are the backends' notes on what klock did to the workdir before
// the agent started (directories it made for PROVIDES rules): context for
// a failure, since the agent did not make them.
func (r *run) klockMade() []string {
	if r.log == nil {
		return nil
	}
	var out []string
	for _, b := range r.log.Backends {
		for _, d := range b.Details {
			if strings.Contains(d, "made before the agent started") {
				out = append(out, b.Name+": "+d)
			}
		}
	}
	return out
}

// backupSize is the size of the pre-flight backups stored in the workdir
// after the run (a /tmp/** scope backed up all of /tmp).
func (r *run) backupSize() int64 {
	var n int64
	filepath.WalkDir(filepath.Join(r.work, ".klock", "backups"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// paths are the file paths the problems of r are about.
func (r *run) problemPaths() []string {
	if r.log == nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	add := func(triple string) {
		_, obj, _ := strings.Cut(triple, " ")
		_, p, ok := strings.Cut(obj, ":")
		if ok && strings.HasPrefix(p, "/") && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, v := range r.log.Violations {
		add(v.Triple)
	}
	for _, o := range r.refusedDeclared() {
		add(o.Triple)
	}
	return out
}

// learnedIntent is one intent line of a learned manifest, its comment kept
// (it says why it was learned).
type learnedIntent struct {
	line string // as written
	path string // the object's path, ${workdir} expanded, without /** or /*
}

var intentLine = regexp.MustCompile(`^\s*-\s+(\{.*\}|[A-Z_]+\s+(FILE|PROC|NET):\S*)`)

func learnedIntents(manifest, workdir string) []learnedIntent {
	var out []learnedIntent
	in := false
	for _, line := range strings.Split(manifest, "\n") {
		if strings.HasPrefix(line, "intents:") {
			in = true
			continue
		}
		if in && line != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "-") {
			in = false
		}
		if !in || !intentLine.MatchString(line) {
			continue
		}
		li := learnedIntent{line: strings.TrimSpace(line)}
		if i := strings.Index(line, "FILE:"); i >= 0 {
			li.path = strings.Fields(line[i+5:])[0]
		} else if i := strings.Index(line, "PROC:"); i >= 0 {
			li.path = strings.Fields(line[i+5:])[0]
		}
		li.path = strings.Trim(strings.ReplaceAll(li.path, "${workdir}", workdir), `",}`)
		li.path = strings.TrimSuffix(strings.TrimSuffix(li.path, "/**"), "/*")
		out = append(out, li)
	}
	return out
}

// related are the learned intents about p's neighbourhood: an intent whose
// path is p's directory or above it (what should have covered p), or lies
// in p's directory (a sibling the learner pinned instead).
func related(intents []learnedIntent, p string) []string {
	dir := filepath.Dir(p)
	var out []string
	for _, li := range intents {
		if li.path == "" {
			continue
		}
		if li.path == p || li.path == dir || strings.HasPrefix(dir, li.path+"/") && li.path != "/" ||
			strings.HasPrefix(li.path, dir+"/") {
			out = append(out, li.line)
		}
	}
	// The widest first: what ought to cover p, then the pinned siblings.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) < len(out[j]) })
	if len(out) > 15 {
		out = append(out[:15], fmt.Sprintf("... %d more", len(out)-15))
	}
	return out
}

// pinned are learned exact-path intents whose last element looks like a
// name chosen anew at every run (a hash, a timestamp, a random suffix): the
// next run will not have it.
func pinned(intents []learnedIntent) []string {
	re := regexp.MustCompile(`[0-9a-f]{12,}|\d{4}-?\d{2}-?\d{2}T\d{2}|\d{8,}|tmp[_.]?[A-Za-z0-9]{6}|go-build\d+|\.[A-Za-z0-9]{6}$`)
	var out []string
	for _, li := range intents {
		if strings.Contains(li.line, "/**") || strings.Contains(li.line, "/* ") || strings.HasSuffix(li.line, "/*") {
			continue
		}
		// The object as written (${workdir} unexpanded), without the comment.
		obj, _, _ := strings.Cut(li.line, " #")
		if li.path != "" && re.MatchString(obj) {
			out = append(out, li.line)
		}
	}
	return out
}

// tail is the last n lines of s, indented.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return "    " + strings.Join(lines, "\n    ")
}

// agentOutput is the agent's part of a run's output for a failure message:
// stdout, and stderr up to klock's summary.
func (r *run) agentOutput() string {
	errPart := r.stderr
	for _, mark := range []string{"\nCLEAN\n", "\nVIOLATION", "\nKILLED", "\nAMENDED", "\nINCOMPLETE"} {
		if i := strings.Index(errPart, mark); i >= 0 {
			errPart = errPart[:i]
		}
	}
	return fmt.Sprintf("  agent stdout:\n%s\n  agent stderr (and klock's messages before its summary):\n%s", tail(r.stdout, 25), tail(errPart, 40))
}

// workload is one real toolchain's job.
type workload struct {
	name string
	// needs are the programs it runs (absolute paths or names on the
	// agent's PATH); missing ones make the workload Unavailable.
	needs []string
	// prepare makes, once and outside klock, what the inputs are built
	// from (tarballs, a warm build cache), under w.in.
	prepare func(t *testing.T, w *world)
	// input fills the fresh workdir with input set n (0: the learning
	// run's and the first strict run's; 1: different).
	input func(t *testing.T, w *world, n int)
	// env is the agent's environment beyond klock's (-e KEY=VALUE).
	env func(w *world) []string
	// script is the agent's job, run as sh -c SCRIPT; $WORKDIR is the
	// workdir.
	script string
	// check is the workload's own verdict on a run with input n: nil when
	// the job did what it should have.
	check func(w *world, n int, r *run) error
}

// agentPATH is klock's PATH for the agent (docs/cli.md: the agent's environment).
const agentPATH = "/usr/local/bin:/usr/bin:/bin"

func TestRealWorld(t *testing.T) {
	testutil.RequirePrivileged(t)
	root, err := os.MkdirTemp(rootBase(), "klock-realworld-")
	if err != nil {
		t.Fatal(err)
	}
	// The agent must be able to reach its workdir.
	for p := root; p != "/"; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o005 != 0o005 {
			if p == root {
				os.Chmod(p, 0o755)
			} else {
				t.Fatalf("%s (mode %v) is not traversable by the agent user; set %s", p, st.Mode().Perm(), rootEnv)
			}
		}
	}
	if os.Getenv(keepEnv) == "1" {
		t.Logf("%s=1: workdirs, manifests and outputs kept under %s", keepEnv, root)
	} else {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("removing %s (set %s=1 to keep the workdirs for inspection)", root, keepEnv)
			}
			os.RemoveAll(root)
		})
	}
	for _, wl := range workloads() {
		t.Run(wl.name, func(t *testing.T) { runWorkload(t, root, wl) })
	}
}

// The steps of every workload: learn, strict with the same input, strict
// with different input.
var steps = []struct {
	name  string
	input int
	learn bool
}{
	{"learn", 0, true},
	{"strict", 0, false},
	{"strict-new-input", 1, false},
}

func runWorkload(t *testing.T, root string, wl workload) {
	for _, n := range wl.needs {
		if _, err := exec.LookPath(n); err != nil {
			testutil.Unavailable(t, fmt.Sprintf("%s needs %s (scripts/deps.sh realworld installs it): %v", wl.name, n, err))
		}
	}
	w := newWorld(t, root, wl.name)
	if wl.prepare != nil {
		wl.prepare(t, w)
	}
	base := filepath.Join(w.dir, "base.yaml")
	learnedPath := filepath.Join(w.dir, "learned.yaml")
	if err := os.WriteFile(base, []byte(baseManifest("rw-"+wl.name+"-agent", w.work)), 0o644); err != nil {
		t.Fatal(err)
	}
	var envArgs []string
	for _, kv := range append([]string{"WORKDIR=" + w.work, "HOME=" + w.W("home")}, wl.env(w)...) {
		envArgs = append(envArgs, "-e", kv)
	}
	var learned []learnedIntent
	parent := t
	for _, st := range steps {
		ok := t.Run(st.name, func(t *testing.T) {
			w.t = t
			defer func() { w.t = parent }()
			w.fresh()
			wl.input(t, w, st.input)
			defer w.retire(st.name)
			var args []string
			manifest := learnedPath
			if st.learn {
				manifest = base
				os.Remove(learnedPath)
				args = []string{"run", "-m", base, "--mode", "permissive", "--backend", "observe", "--learn", learnedPath}
			} else {
				if learned == nil {
					t.Fatalf("no learned manifest: the learn step failed")
				}
				args = []string{"run", "-m", learnedPath}
			}
			args = append(append(args, envArgs...), "--", "/bin/sh", "-c", wl.script)
			r := w.klockRun(st.name, manifest, args...)
			t.Log(r.headline())
			checkErr := wl.check(w, st.input, r)
			if st.learn {
				checkLearn(t, w, r, learnedPath, checkErr, &learned)
				return
			}
			if checkStrict(t, r, checkErr, learned) || os.Getenv(diagnoseEnv) == "0" {
				return
			}
			// What else the learned manifest misses for this input: the
			// strict run stopped at the first violation, a permissive run
			// with no wall (observe) goes to the end and records them all.
			w.retire(st.name)
			w.fresh()
			wl.input(t, w, st.input)
			args = append([]string{"run", "-m", learnedPath, "--mode", "permissive", "--backend", "observe"}, args[3:]...)
			d := w.klockRun(st.name+"-diagnose", learnedPath, args...)
			w.retire(st.name + "-diagnose")
			t.Log(d.headline())
			t.Logf("the same step in permissive mode with no wall (`klock run -m learned.yaml --mode permissive --backend observe`), to see everything the learned manifest does not cover for this input:\n%s", d.uncovered(w.work))
		})
		if !ok && st.learn && learned == nil {
			return
		}
	}
}

// checkLearn: the learning run must finish (permissive mode lets it), do the
// job, and write a manifest klock validate accepts.
func checkLearn(t *testing.T, w *world, r *run, learnedPath string, checkErr error, learned *[]learnedIntent) {
	t.Helper()
	if r.err != nil || r.exit != 0 {
		t.Errorf("learning run (%s): exit %s, want 0 (permissive mode lets everything through)\n%s", strings.Join(r.args, " "), exitMeaning(r.exit), r.agentOutput())
	}
	if r.err != nil {
		t.Error(r.err)
	}
	if r.logErr != nil {
		t.Errorf("learning run: %v", r.logErr)
	}
	if checkErr != nil {
		t.Errorf("learning run: the workload's own check failed (the job did not get done under observation, so what was learned is not the job): %v\n%s", checkErr, r.agentOutput())
	}
	// The issue: a learning run printed 725 to 14,941 lines (C).
	t.Logf("learning run printed %d lines on stderr", strings.Count(r.stderr, "\n"))
	data, err := os.ReadFile(learnedPath)
	if err != nil {
		t.Fatalf("learning run wrote no manifest (--learn %s): %v\n%s", learnedPath, err, r.agentOutput())
	}
	if out, err := exec.Command(w.klock, "validate", learnedPath).CombinedOutput(); err != nil {
		t.Errorf("klock validate %s: %v\n%s", learnedPath, err, out)
	}
	*learned = learnedIntents(string(data), w.work)
	t.Logf("learned %d intents (%s)", len(*learned), learnedPath)
	if p := pinned(*learned); len(p) > 0 {
		t.Logf("learned exact paths that look chosen anew at every run (the next run will not have them):\n    %s", strings.Join(p, "\n    "))
	}
}

// uncovered summarizes a permissive run's violations, each one an
// operation its manifest did not declare: grouped by predicate and
// directory, with an example name.
func (r *run) uncovered(workdir string) string {
	if r.log == nil {
		return "    (no verification log: " + fmt.Sprint(r.logErr) + ")"
	}
	if len(r.log.Violations) == 0 {
		return "    nothing: every operation was declared (the strict run's failure is the wall's, not the learned manifest's)"
	}
	type group struct {
		key, example string
		n            int
	}
	groups := map[string]*group{}
	var order []string
	for _, v := range r.log.Violations {
		pred, obj, _ := strings.Cut(v.Triple, " ")
		typ, p, _ := strings.Cut(obj, ":")
		key, example := pred+" "+typ+":"+filepath.Dir(p)+"/", filepath.Base(p)
		switch {
		case p == "":
			// An operation on a file descriptor whose file has no name
			// (unlinked, O_TMPFILE): tempfile.TemporaryFile.
			key, example = pred+" "+typ+": (no name: an unlinked or O_TMPFILE file)", v.Comm+" "+v.Syscall
		case !strings.HasPrefix(p, "/"):
			key = pred + " " + obj
		}
		key = strings.ReplaceAll(key, workdir, "${workdir}")
		g := groups[key]
		if g == nil {
			g = &group{key: key, example: example}
			groups[key] = g
			order = append(order, key)
		}
		g.n++
	}
	var b strings.Builder
	for i, k := range order {
		if i == 25 {
			fmt.Fprintf(&b, "    ... %d more groups (klock log -v %s)\n", len(order)-25, r.logPath)
			break
		}
		g := groups[k]
		fmt.Fprintf(&b, "    %s  (%d undeclared, e.g. %s)\n", g.key, g.n, g.example)
	}
	return strings.TrimRight(b.String(), "\n")
}

// checkStrict: exit 0, CLEAN, nothing refused, nothing lost, and the job
// done. It reports whether the run passed.
func checkStrict(t *testing.T, r *run, checkErr error, learned []learnedIntent) bool {
	t.Helper()
	probs := r.problems()
	if len(probs) == 0 && checkErr == nil {
		return true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "strict run %q is not a clean pass (%s):\n", r.step, r.logPath)
	for _, p := range probs {
		fmt.Fprintf(&b, "  - %s\n", p)
	}
	if checkErr != nil {
		fmt.Fprintf(&b, "  - the workload's own check failed: %v\n", checkErr)
	}
	for _, d := range r.klockMade() {
		fmt.Fprintf(&b, "  context: %s\n", d)
	}
	if paths := r.problemPaths(); len(paths) > 0 {
		b.WriteString("  learned intents about those paths:\n")
		for i, p := range paths {
			if i == 8 {
				fmt.Fprintf(&b, "    ... %d more paths\n", len(paths)-8)
				break
			}
			rel := related(learned, p)
			if len(rel) == 0 {
				fmt.Fprintf(&b, "    %s: none\n", p)
				continue
			}
			fmt.Fprintf(&b, "    %s:\n      %s\n", p, strings.Join(rel, "\n      "))
		}
	}
	b.WriteString(r.agentOutput())
	t.Error(b.String())
	return false
}

// TestREADMEBaseManifest: the README's smallest manifest, the one a new
// user starts a learning run from, is accepted as written (a new user could
// not write one from the README alone: it showed cost_envelope as a
// placeholder and never said it is required).
func TestREADMEBaseManifest(t *testing.T) {
	klock := klockBin(t)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "The smallest manifest a learning run starts from:")
	_, rest, ok2 := strings.Cut(rest, "```yaml\n")
	yml, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md has no smallest manifest (\"The smallest manifest a learning run starts from:\" and a yaml block)")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(yml, "/srv/repo", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(klock, "validate", p).CombinedOutput(); err != nil {
		t.Errorf("klock validate of the README's smallest manifest: %v\n%s\n%s", err, out, yml)
	}
}
