//go:build linux

package realworld

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/realrun"
)

// suite: its directories under $KLOCK_REALWORLD_ROOT, kept when
// KLOCK_REALWORLD_KEEP=1; a toolchain's step may take 4 minutes.
var suite = realrun.Suite{Name: "realworld", RootEnv: "KLOCK_REALWORLD_ROOT", KeepEnv: "KLOCK_REALWORLD_KEEP", Timeout: runTimeout()}

// runTimeout bounds one `klock run` of a workload: a hung agent fails its
// step, not the whole suite. Under emulation (the VM matrix: one TCG
// thread, a boot beside another on each host CPU) pip in a venv runs
// several times slower than on the host.
func runTimeout() time.Duration {
	if os.Getenv("KLOCK_IN_VM") == "1" {
		return 10 * time.Minute
	}
	return 4 * time.Minute
}

// diagnoseEnv=0: no permissive rerun of a failed strict step.
const diagnoseEnv = "KLOCK_REALWORLD_DIAGNOSE"

func TestMain(m *testing.M) { os.Exit(realrun.Main(m)) }

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
	*realrun.Area
	in string // inputs the test prepared (tarballs, caches), outside the workdir
}

func newWorld(t *testing.T, root, name string) *world {
	t.Helper()
	w := &world{Area: suite.NewArea(t, root, name)}
	w.in = filepath.Join(w.Dir, "inputs")
	if err := os.MkdirAll(w.in, 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// fresh makes an empty workdir owned by the agent, with the agent's home
// (HOME, as docs/cli.md suggests for tools that keep a cache: -e
// HOME=<workdir>/home) in it.
func (w *world) fresh() {
	w.T.Helper()
	w.Fresh()
	w.Mkdir(w.W("home"))
}

// retire moves the workdir aside as <step>.workdir, for inspection.
func (w *world) retire(step string) {
	w.T.Helper()
	w.MoveAside(w.Work, step+".workdir")
}

// file writes an agent-owned file under the workdir (rel), making its
// directories.
func (w *world) file(rel, content string, mode os.FileMode) {
	w.T.Helper()
	w.File(w.W(rel), content, mode)
}

// copyIn copies src (a file or a tree) to rel under the workdir, owned by
// the agent.
func (w *world) copyIn(src, rel string) {
	w.T.Helper()
	dst := w.W(rel)
	w.Mkdir(filepath.Dir(dst))
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		w.T.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
	realrun.ChownTree(w.T, dst)
}

// asAgent runs a command outside klock as the agent user (to prepare
// inputs: a warm cache the agent will own), failing the test when it fails.
func asAgent(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: realrun.AgentUID, Gid: realrun.AgentGID}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("preparing inputs: %s %s (as uid %d, in %s): %v\n%s", name, strings.Join(args, " "), realrun.AgentUID, dir, err, out)
	}
	return string(out)
}

// run is one `klock run` of a step, with what this suite reads from it
// beyond realrun's.
type run struct{ *realrun.Run }

// klockRun runs klock with args in the workdir (realrun.Area.KlockRun).
func (w *world) klockRun(step string, args ...string) *run {
	w.T.Helper()
	return &run{w.KlockRun(step, args...)}
}

// headline is one line about a run for -v output, with the size of its
// pre-flight backup.
func (r *run) headline() string {
	return r.Headline() + fmt.Sprintf("; pre-flight backup %.1f MB", float64(r.backupSize())/(1<<20))
}

// problems are realrun's Problems of a strict run and what its rollback
// did.
func (r *run) problems() []string {
	p := r.Problems()
	if rb := r.rollbackSummary(); r.LogErr == nil && rb != "" {
		p = append(p, rb)
	}
	return p
}

// rollbackSummary says what the strict kill's rollback did: counts per
// action, every path outside the workdir (a rollback must touch
// only what the agent could change) and the first few inside it.
func (r *run) rollbackSummary() string {
	if r.Log == nil || len(r.Log.Rollback) == 0 {
		return ""
	}
	count := map[string]int{}
	var outside, inside, failed []string
	for _, op := range r.Log.Rollback {
		count[op.Action]++
		desc := op.Action + " " + op.Path
		switch {
		case !op.OK:
			failed = append(failed, desc+": "+op.Error)
		case op.Path != r.Work && !strings.HasPrefix(op.Path, r.Work+"/"):
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

// klockMade are the backends' notes on what klock did to the workdir before
// the agent started (directories it made for PROVIDES rules): context for
// a failure, since the agent did not make them.
func (r *run) klockMade() []string {
	if r.Log == nil {
		return nil
	}
	var out []string
	for _, b := range r.Log.Backends {
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
	filepath.WalkDir(filepath.Join(r.Work, ".klock", "backups"), func(_ string, d os.DirEntry, err error) error {
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
	if r.Log == nil {
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
	for _, v := range r.Log.Violations {
		add(v.Triple)
	}
	for _, o := range r.RefusedDeclared() {
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

// agentOutput is the agent's part of a run's output for a failure message:
// stdout, and stderr up to klock's summary.
func (r *run) agentOutput() string {
	errPart := r.Stderr
	for _, mark := range []string{"\nCLEAN\n", "\nVIOLATION", "\nKILLED", "\nAMENDED", "\nINCOMPLETE"} {
		if i := strings.Index(errPart, mark); i >= 0 {
			errPart = errPart[:i]
		}
	}
	return fmt.Sprintf("  agent stdout:\n%s\n  agent stderr (and klock's messages before its summary):\n%s", realrun.Tail(r.Stdout, 25), realrun.Tail(errPart, 40))
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

// onlyWorkloads names the workloads to run (comma-separated), for a host
// that cannot run them all (the VM's RAM root has git and python3, not
// node, gcc or go). A name no workload has fails the run, so a renamed
// workload cannot leave a list that quietly runs nothing.
var onlyWorkloads = flag.String("realworld.only", "", "run only these workloads (comma-separated names)")

func TestRealWorld(t *testing.T) {
	testutil.RequirePrivileged(t)
	chosen, err := chooseWorkloads(workloads(), *onlyWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	root := suite.Root(t, "")
	for _, wl := range chosen {
		t.Run(wl.name, func(t *testing.T) { runWorkload(t, root, wl) })
	}
}

// chooseWorkloads returns the workloads only names, in only's order, or
// all of them when only is empty.
func chooseWorkloads(all []workload, only string) ([]workload, error) {
	if only == "" {
		return all, nil
	}
	byName := map[string]workload{}
	var names []string
	for _, wl := range all {
		byName[wl.name] = wl
		names = append(names, wl.name)
	}
	var chosen []workload
	for _, n := range strings.Split(only, ",") {
		wl, ok := byName[strings.TrimSpace(n)]
		if !ok {
			return nil, fmt.Errorf("-realworld.only: no workload is named %q (the workloads: %s)", n, strings.Join(names, ", "))
		}
		chosen = append(chosen, wl)
	}
	return chosen, nil
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
	base := filepath.Join(w.Dir, "base.yaml")
	learnedPath := filepath.Join(w.Dir, "learned.yaml")
	if err := os.WriteFile(base, []byte(baseManifest("rw-"+wl.name+"-agent", w.Work)), 0o644); err != nil {
		t.Fatal(err)
	}
	var envArgs []string
	for _, kv := range append([]string{"WORKDIR=" + w.Work, "HOME=" + w.W("home")}, wl.env(w)...) {
		envArgs = append(envArgs, "-e", kv)
	}
	var learned []learnedIntent
	parent := t
	for _, st := range steps {
		ok := t.Run(st.name, func(t *testing.T) {
			w.T = t
			defer func() { w.T = parent }()
			w.fresh()
			wl.input(t, w, st.input)
			defer w.retire(st.name)
			var args []string
			if st.learn {
				os.Remove(learnedPath)
				args = []string{"run", "-m", base, "--mode", "permissive", "--backend", "observe", "--learn", learnedPath}
			} else {
				if learned == nil {
					t.Fatalf("no learned manifest: the learn step failed")
				}
				args = []string{"run", "-m", learnedPath}
			}
			args = append(append(args, envArgs...), "--", "/bin/sh", "-c", wl.script)
			r := w.klockRun(st.name, args...)
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
			d := w.klockRun(st.name+"-diagnose", args...)
			w.retire(st.name + "-diagnose")
			t.Log(d.headline())
			t.Logf("the same step in permissive mode with no wall (`klock run -m learned.yaml --mode permissive --backend observe`), to see everything the learned manifest does not cover for this input:\n%s", d.uncovered(w.Work))
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
	if r.Err != nil || r.Exit != 0 {
		t.Errorf("learning run (%s): exit %s, want 0 (permissive mode lets everything through)\n%s", strings.Join(r.Args, " "), realrun.ExitMeaning(r.Exit), r.agentOutput())
	}
	if r.Err != nil {
		t.Error(r.Err)
	}
	if r.LogErr != nil {
		t.Errorf("learning run: %v", r.LogErr)
	}
	if checkErr != nil {
		t.Errorf("learning run: the workload's own check failed (the job did not get done under observation, so what was learned is not the job): %v\n%s", checkErr, r.agentOutput())
	}
	// The issue: a learning run printed 725 to 14,941 lines (C).
	t.Logf("learning run printed %d lines on stderr", strings.Count(r.Stderr, "\n"))
	data, err := os.ReadFile(learnedPath)
	if err != nil {
		t.Fatalf("learning run wrote no manifest (--learn %s): %v\n%s", learnedPath, err, r.agentOutput())
	}
	if out, err := exec.Command(w.Klock, "validate", learnedPath).CombinedOutput(); err != nil {
		t.Errorf("klock validate %s: %v\n%s", learnedPath, err, out)
	}
	*learned = learnedIntents(string(data), w.Work)
	t.Logf("learned %d intents (%s)", len(*learned), learnedPath)
	if p := pinned(*learned); len(p) > 0 {
		t.Logf("learned exact paths that look chosen anew at every run (the next run will not have them):\n    %s", strings.Join(p, "\n    "))
	}
}

// uncovered summarizes a permissive run's violations, each one an
// operation its manifest did not declare: grouped by predicate and
// directory, with an example name.
func (r *run) uncovered(workdir string) string {
	if r.Log == nil {
		return "    (no verification log: " + fmt.Sprint(r.LogErr) + ")"
	}
	if len(r.Log.Violations) == 0 {
		return "    nothing: every operation was declared (the strict run's failure is the wall's, not the learned manifest's)"
	}
	type group struct {
		key, example string
		n            int
	}
	groups := map[string]*group{}
	var order []string
	for _, v := range r.Log.Violations {
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
			fmt.Fprintf(&b, "    ... %d more groups (klock log -v %s)\n", len(order)-25, r.LogPath)
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
	fmt.Fprintf(&b, "strict run %q is not a clean pass (%s):\n", r.Step, r.LogPath)
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
	klock := suite.Klock(t)
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

func TestChooseWorkloadsRefusesAnUnknownName(t *testing.T) {
	all := workloads()
	got, err := chooseWorkloads(all, "shell,git")
	if err != nil || len(got) != 2 || got[0].name != "shell" || got[1].name != "git" {
		t.Fatalf("chooseWorkloads(shell,git) = %d workloads, %v", len(got), err)
	}
	if got, _ := chooseWorkloads(all, ""); len(got) != len(all) {
		t.Fatalf("an empty list chose %d of %d workloads", len(got), len(all))
	}
	if _, err := chooseWorkloads(all, "shell,gti"); err == nil || !strings.Contains(err.Error(), `"gti"`) {
		t.Fatalf("a misspelt workload was accepted: %v", err)
	}
}
