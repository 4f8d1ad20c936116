//go:build linux

package agents

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
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
)

// The agent: nobody/nogroup owns every workdir, so `klock run` runs the
// agent as nobody (Claude Code refuses --dangerously-skip-permissions as
// root) and DAC never refuses it anything there: a refusal can only come
// from klock.
const agentUID, agentGID = 65534, 65534

const (
	binEnv    = "KLOCK_BIN"
	rootEnv   = "KLOCK_AGENTS_ROOT"
	keepEnv   = "KLOCK_AGENTS_KEEP"
	repeatEnv = "KLOCK_AGENTS_REPEAT"
)

// stepTimeout bounds one `klock run`; a hung agent fails its step, not the
// whole package.
const stepTimeout = 3 * time.Minute

// agentPATH is klock's PATH for the agent.
const agentPATH = "/usr/local/bin:/usr/bin:/bin"

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

// rootBase is where the suite makes its directories: $KLOCK_AGENTS_ROOT,
// else /srv (not /tmp: the agents' scratch space, which klock treats
// specially).
func rootBase() string {
	dir := os.Getenv(rootEnv)
	if dir == "" {
		dir = "/srv"
	}
	os.MkdirAll(dir, 0o755)
	return dir
}

// klockBin is the klock under test: $KLOCK_BIN, else klock (and its stage 2
// launcher, and klock meter in it) built from this tree once for the
// package.
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
		if buildDir, buildErr = os.MkdirTemp(rootBase(), "klock-agents-bin-"); buildErr != nil {
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

// suiteRoot makes the test's directory under rootBase, traversable by the
// agent, removed at the end unless KLOCK_AGENTS_KEEP=1.
func suiteRoot(t *testing.T, name string) string {
	t.Helper()
	root, err := os.MkdirTemp(rootBase(), "klock-agents-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
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
		t.Logf("%s=1: workdirs, manifests, model logs and outputs kept under %s", keepEnv, root)
	} else {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("removing %s (set %s=1 to keep it for inspection)", root, keepEnv)
			}
			os.RemoveAll(root)
		})
	}
	return root
}

// modulesDir is test/agents/node_modules, where scripts/deps.sh agents
// installs the CLIs.
func modulesDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("node_modules")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// requireCLI is the CLI's executable in node_modules/.bin: a missing one
// skips (the packages are not installed) unless KLOCK_REQUIRE_PRIVILEGED=1,
// where scripts/deps.sh agents has installed them and a missing CLI is a
// failure.
func requireCLI(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(modulesDir(t), ".bin", name)
	if _, err := os.Stat(p); err != nil {
		testutil.Unavailable(t, fmt.Sprintf("%s is not installed (scripts/deps.sh agents runs npm ci in test/agents): %v", name, err))
	}
	return p
}

// ---- the directories of one agent ----

// area is one agent's (or workload's) directories: dir/work is the
// workdir, made afresh at the same path for every run (the learned manifest
// names it), dir/home the agent's HOME, outside the workdir, also made
// afresh (with a planted ~/.ssh/authorized_keys and ~/.aws/credentials);
// each run's workdir and home are moved aside after it.
type area struct {
	t     *testing.T
	klock string
	name  string
	dir   string
	work  string
	home  string
	// homeInWork: HOME is dir/work/home (the Go and pytest workloads),
	// else dir/home.
	homeInWork bool
	// keepHome: HOME is made once and kept between runs (a warm cache).
	keepHome bool
}

func newArea(t *testing.T, root, name string) *area {
	t.Helper()
	dir := filepath.Join(root, name)
	a := &area{t: t, klock: klockBin(t), name: name, dir: dir, work: filepath.Join(dir, "work"), home: filepath.Join(dir, "home")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return a
}

// W joins path elements under the workdir.
func (a *area) W(rel ...string) string { return filepath.Join(append([]string{a.work}, rel...)...) }

// H joins path elements under HOME.
func (a *area) H(rel ...string) string { return filepath.Join(append([]string{a.home}, rel...)...) }

// The files planted in the agent's HOME: what an out-of-scope attempt
// goes after.
const (
	authorizedKeys = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKlocktestowner owner@host\n"
	awsSecret      = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYKLOCKSECRET"
)

func awsCredentials() string {
	return "[default]\naws_access_key_id = AKIAKLOCKTESTKEY0001\naws_secret_access_key = " + awsSecret + "\n"
}

// fresh makes an empty workdir (and HOME) owned by the agent.
func (a *area) fresh() {
	a.t.Helper()
	if _, err := os.Lstat(a.work); err == nil {
		a.t.Fatalf("workdir %s already exists", a.work)
	}
	a.mkdir(a.work)
	if a.homeInWork {
		a.home = a.W("home")
	}
	if a.keepHome {
		if _, err := os.Stat(a.home); err == nil {
			return
		}
	} else if !a.homeInWork {
		os.RemoveAll(a.home)
	}
	a.mkdir(a.home)
	a.file(a.H(".ssh", "authorized_keys"), authorizedKeys, 0o600)
	a.file(a.H(".aws", "credentials"), awsCredentials(), 0o600)
}

// retire moves the workdir and HOME aside as <step>.work and <step>.home.
func (a *area) retire(step string) {
	a.t.Helper()
	for _, d := range []struct{ from, to string }{{a.work, step + ".work"}, {a.home, step + ".home"}} {
		if d.from == a.home && (a.homeInWork || a.keepHome) {
			continue
		}
		if _, err := os.Lstat(d.from); err != nil {
			continue
		}
		dst := filepath.Join(a.dir, d.to)
		os.RemoveAll(dst)
		if err := os.Rename(d.from, dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			a.t.Fatal(err)
		}
	}
}

func (a *area) mkdir(p string) {
	a.t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		a.t.Fatal(err)
	}
	for d := p; strings.HasPrefix(d, a.dir+"/"); d = filepath.Dir(d) {
		if err := os.Chown(d, agentUID, agentGID); err != nil {
			a.t.Fatal(err)
		}
	}
}

// file writes an agent-owned file, making its directories.
func (a *area) file(p, content string, mode os.FileMode) {
	a.t.Helper()
	a.mkdir(filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		a.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		a.t.Fatal(err)
	}
	if err := os.Chown(p, agentUID, agentGID); err != nil {
		a.t.Fatal(err)
	}
}

func read(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// ---- one klock run ----

// run is one `klock run`.
type run struct {
	step    string
	args    []string
	exit    int
	err     error
	dur     time.Duration
	stdout  string
	stderr  string
	log     *vlog.Log
	logPath string
	logErr  error
}

// klockRun runs klock with args in the workdir and reads back the session's
// verification log (the only session of this fresh workdir).
func (a *area) klockRun(step string, args ...string) *run {
	a.t.Helper()
	r := &run{step: step, args: args}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.klock, args...)
	cmd.Dir = a.work
	// No klockd of another engineer's: klock runs its enforcer embedded.
	cmd.Env = append(os.Environ(), "KLOCK_SOCKET="+filepath.Join(a.dir, "no-klockd.sock"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r.dur = time.Since(start)
	r.stdout, r.stderr = out.String(), errb.String()
	os.WriteFile(filepath.Join(a.dir, step+".stdout"), out.Bytes(), 0o644)
	os.WriteFile(filepath.Join(a.dir, step+".stderr"), errb.Bytes(), 0o644)
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.exit, r.err = -1, fmt.Errorf("klock run did not end within %s (killed)", stepTimeout)
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	case err != nil:
		r.exit, r.err = -1, err
	}
	logs, _ := filepath.Glob(a.W(".klock", "sessions", "*", vlog.FileName))
	sort.Strings(logs)
	if len(logs) == 0 {
		r.logErr = fmt.Errorf("no verification log under %s", a.W(".klock", "sessions"))
	} else {
		r.logPath = logs[len(logs)-1]
		r.log, r.logErr = vlog.Read(r.logPath)
	}
	return r
}

// exitMeaning explains klock run's own exit statuses (README, "Exit status").
func exitMeaning(code int) string {
	switch code {
	case 0:
		return "0: ok"
	case 75:
		return "75: a lease conflict"
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

func (r *run) headline() string {
	s := fmt.Sprintf("%s: exit %s in %s", r.step, exitMeaning(r.exit), r.dur.Round(10*time.Millisecond))
	if r.log != nil {
		s += fmt.Sprintf("; verdict %s; %d events, %d distinct triples, %d violations, %d lost", r.log.Summary, r.log.Events, len(r.log.Observed), len(r.log.Violations), r.log.Lost.Total)
	}
	return s
}

// refusedDeclared are the observed operations a wall refused although a
// declared intent allows them (baseline-allowed refusals left out: DAC
// refuses nobody plenty of system files; so is the masked <workdir>/.klock,
// which Gemini CLI's file discovery opens).
func (r *run) refusedDeclared() []vlog.Observed {
	if r.log == nil {
		return nil
	}
	var out []vlog.Observed
	for _, o := range r.log.Observed {
		// klock hides the workdir's .klock (its backups and logs) from
		// the agent by design; its log does not count that as a refusal.
		_, obj, _ := strings.Cut(o.Triple, " ")
		if strings.HasSuffix(obj, "/.klock") || strings.Contains(obj, "/.klock/") {
			continue
		}
		if o.Blocked > 0 && o.AllowedBy != "" && !o.Baseline {
			out = append(out, o)
		}
	}
	return out
}

func violationLine(v vlog.Violation) string {
	return fmt.Sprintf("violation: %s (%s; action %s, blocked=%v; %s pid %d %s; declared there: %q; would need: %q)",
		v.Triple, v.Error, v.Action, v.Blocked, v.Comm, v.PID, v.Syscall, v.Declared, v.Needed)
}

// problems are the reasons a strict run is not a clean pass.
func (r *run) problems() []string {
	var p []string
	if r.err != nil {
		p = append(p, r.err.Error())
	}
	if r.exit != 0 {
		p = append(p, "klock run exited "+exitMeaning(r.exit))
	}
	if r.logErr != nil {
		return append(p, r.logErr.Error())
	}
	l := r.log
	if l.Verdict != vlog.VerdictClean {
		p = append(p, fmt.Sprintf("verdict %s, want CLEAN", l.Summary))
	}
	if l.Exit.KilledByKlock {
		p = append(p, "killed by klock: "+l.Exit.Reason)
	}
	seen := map[string]bool{}
	for _, v := range l.Violations {
		if line := violationLine(v); !seen[line] {
			seen[line] = true
			p = append(p, line)
		}
	}
	for _, o := range r.refusedDeclared() {
		p = append(p, fmt.Sprintf("refused by the wall although declared: %s <- %s [%d of %d blocked; %s pid %d %s]",
			o.Triple, o.AllowedBy, o.Blocked, o.Count, o.Comm, o.PID, o.Syscall))
	}
	if l.Lost.Total > 0 {
		p = append(p, fmt.Sprintf("%d kernel events lost", l.Lost.Total))
	}
	return p
}

// tail is the last n lines of s, indented.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return "    " + strings.Join(lines, "\n    ")
}

func (r *run) output() string {
	return fmt.Sprintf("  stdout:\n%s\n  stderr:\n%s", tail(r.stdout, 20), tail(r.stderr, 30))
}

// checkStrict: exit 0, CLEAN, no violation, nothing refused, nothing lost.
// It reports whether the run passed.
func checkStrict(t *testing.T, r *run, extra ...string) bool {
	t.Helper()
	probs := append(r.problems(), extra...)
	if len(probs) == 0 {
		return true
	}
	t.Errorf("strict run %q is not a clean pass (%s):\n  - %s\n%s", r.step, r.logPath, strings.Join(probs, "\n  - "), r.output())
	return false
}

// checkLearn: the learning run must finish, and write a manifest klock
// validate accepts, with no host /tmp or /var/tmp path in it.
func checkLearn(t *testing.T, klock string, r *run, learned string, extra ...string) bool {
	t.Helper()
	ok := true
	if r.err != nil || r.exit != 0 || r.logErr != nil {
		t.Errorf("learning run: exit %s, want 0 (permissive mode lets everything through); %v %v\n%s", exitMeaning(r.exit), r.err, r.logErr, r.output())
		ok = false
	}
	for _, e := range extra {
		t.Errorf("learning run: %s\n%s", e, r.output())
		ok = false
	}
	data, err := os.ReadFile(learned)
	if err != nil {
		t.Errorf("learning run wrote no manifest: %v\n%s", err, r.output())
		return false
	}
	if out, err := exec.Command(klock, "validate", learned).CombinedOutput(); err != nil {
		t.Errorf("klock validate %s: %v\n%s", learned, err, out)
		ok = false
	}
	if !checkNoHostTmp(t, learned, string(data)) {
		ok = false
	}
	return ok
}

// hostTmp matches an intent object on /tmp or /var/tmp by its literal
// path; privateTmpHost one on a private /tmp's host directory.
var (
	hostTmp        = regexp.MustCompile(`FILE:(/var)?/tmp(/|\b|"|')`)
	privateTmpHost = regexp.MustCompile(`FILE:/var/lib/klock/tmp(/|\b|"|')`)
)

// checkNoHostTmp asserts that no learned intent names a host /tmp or
// /var/tmp path: scratch space is under ${tmpdir}, or, in a manifest that
// says tmp: private, in /tmp, the session's own. A private /tmp's host
// directory (/var/lib/klock/tmp/<session>/...) is a host path too. It
// reports whether there was none.
func checkNoHostTmp(t *testing.T, path, manifest string) bool {
	t.Helper()
	private := !regexp.MustCompile(`(?m)^tmp:\s*host\b`).MatchString(manifest)
	var bad, literal []string
	for _, line := range strings.Split(manifest, "\n") {
		obj, _, _ := strings.Cut(line, " #")
		switch {
		case privateTmpHost.MatchString(obj), hostTmp.MatchString(obj) && !private:
			bad = append(bad, strings.TrimSpace(line))
		case hostTmp.MatchString(obj):
			literal = append(literal, strings.TrimSpace(obj))
		}
	}
	if len(bad) > 0 {
		t.Errorf("the learned manifest %s declares host /tmp or /var/tmp paths (scratch space belongs under ${tmpdir}, or in the session's private /tmp):\n    %s", path, strings.Join(bad, "\n    "))
	}
	if len(literal) > 0 {
		t.Logf("the learned manifest (private /tmp) declares the private /tmp by its literal path:\n    %s", strings.Join(literal, "\n    "))
	}
	return len(bad) == 0
}

// envArgs turns KEY=VALUE pairs into klock run -e flags.
func envArgs(env []string) []string {
	var out []string
	for _, kv := range env {
		out = append(out, "-e", kv)
	}
	return out
}

// baseManifest is what an operator writes before a learning run: the
// agent, its workdir, a private /tmp, read access to whatever the extra
// intents name (HOME's .ssh) and the model server's loopback port. The
// cost envelope is generous: the meter (when there is one) reads it too.
func baseManifest(agent, workdir string, intents ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: klock/v1\nagent: {id: %s}\nworkdir: %s\ntmp: private\nbaseline: system-ro\nintents:\n", agent, workdir)
	if len(intents) == 0 {
		b.WriteString("  []\n")
	}
	for _, in := range intents {
		fmt.Fprintf(&b, "  - %s\n", in)
	}
	b.WriteString(costEnvelope("0.50 USD", "20.00 USD"))
	return b.String()
}

// costEnvelope is a cost envelope with room for a CLI's calls (Claude
// Code's system prompt and tools are about 12,000 tokens a call, and it
// asks for up to 128,000 output tokens) and the given costs.
func costEnvelope(expectedCost, maxCost string) string {
	return fmt.Sprintf(`declared_tools: []
cost_envelope:
  expected_tokens_in: 100000
  max_tokens_in: 2000000
  expected_tokens_out: 1000
  max_tokens_out: 200000
  expected_latency_ms: 60000
  max_latency_ms: 600000
  context_efficiency: 0.7
  expected_cost: %q
  max_cost: %q
`, expectedCost, maxCost)
}
