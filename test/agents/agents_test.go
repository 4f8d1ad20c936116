//go:build linux

package agents

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/realrun"
)

// suite: its directories under $KLOCK_AGENTS_ROOT, kept when
// KLOCK_AGENTS_KEEP=1; a CLI's run may take 3 minutes. The agent runs as
// nobody, the owner of its workdir (realrun.AgentUID): Claude Code refuses
// --dangerously-skip-permissions as root.
var suite = realrun.Suite{Name: "agents", RootEnv: "KLOCK_AGENTS_ROOT", KeepEnv: "KLOCK_AGENTS_KEEP", Timeout: 3 * time.Minute}

// repeatEnv=N: TestFourAtOnce's strict sessions run N times.
const repeatEnv = "KLOCK_AGENTS_REPEAT"

func TestMain(m *testing.M) { os.Exit(realrun.Main(m)) }

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

// area is one agent's (or workload's) directories (a realrun.Area:
// dir/work is the workdir, made afresh at the same path for every run),
// and dir/home the agent's HOME, outside the workdir, also made afresh
// (with a planted ~/.ssh/authorized_keys and ~/.aws/credentials); each
// run's workdir and home are moved aside after it.
type area struct {
	*realrun.Area
	name string
	home string
	// homeInWork: HOME is dir/work/home (the Go and pytest workloads),
	// else dir/home.
	homeInWork bool
	// keepHome: HOME is made once and kept between runs (a warm cache).
	keepHome bool
}

func newArea(t *testing.T, root, name string) *area {
	t.Helper()
	a := &area{Area: suite.NewArea(t, root, name), name: name}
	a.home = filepath.Join(a.Dir, "home")
	return a
}

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
	a.T.Helper()
	a.Fresh()
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
	a.Mkdir(a.home)
	a.File(a.H(".ssh", "authorized_keys"), authorizedKeys, 0o600)
	a.File(a.H(".aws", "credentials"), awsCredentials(), 0o600)
}

// retire moves the workdir and HOME aside as <step>.work and <step>.home.
func (a *area) retire(step string) {
	a.T.Helper()
	a.MoveAside(a.Work, step+".work")
	if !a.homeInWork && !a.keepHome {
		a.MoveAside(a.home, step+".home")
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
type run struct{ *realrun.Run }

// klockRun runs klock with args in the workdir (realrun.Area.KlockRun).
func (a *area) klockRun(step string, args ...string) *run {
	a.T.Helper()
	return &run{a.KlockRun(step, args...)}
}

func (r *run) output() string {
	return fmt.Sprintf("  stdout:\n%s\n  stderr:\n%s", realrun.Tail(r.Stdout, 20), realrun.Tail(r.Stderr, 30))
}

// checkStrict: exit 0, CLEAN, no violation, nothing refused, nothing lost.
// It reports whether the run passed.
func checkStrict(t *testing.T, r *run, extra ...string) bool {
	t.Helper()
	probs := append(r.Problems(), extra...)
	if len(probs) == 0 {
		return true
	}
	t.Errorf("strict run %q is not a clean pass (%s):\n  - %s\n%s", r.Step, r.LogPath, strings.Join(probs, "\n  - "), r.output())
	return false
}

// checkLearn: the learning run must finish, and write a manifest klock
// validate accepts, with no host /tmp or /var/tmp path in it.
func checkLearn(t *testing.T, klock string, r *run, learned string, extra ...string) bool {
	t.Helper()
	ok := true
	if r.Err != nil || r.Exit != 0 || r.LogErr != nil {
		t.Errorf("learning run: exit %s, want 0 (permissive mode lets everything through); %v %v\n%s", realrun.ExitMeaning(r.Exit), r.Err, r.LogErr, r.output())
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
