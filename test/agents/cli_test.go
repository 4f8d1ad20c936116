//go:build linux

package agents

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/realrun"
)

// cliSpec is how one coding-agent CLI is run non-interactively against the
// scripted model.
type cliSpec struct {
	name string // its executable in node_modules/.bin
	// env is the agent's environment (beyond klock's PATH, LANG, TERM,
	// TZ) for a model API at url.
	env func(a *area, url string) []string
	// prepare writes its configuration into the fresh HOME.
	prepare func(a *area, url string)
	// argv runs task.
	argv func(bin, task string) []string
}

// claudeCode: claude -p TASK, the permission prompts off (refused as root:
// the agent is nobody), the Messages API at ANTHROPIC_BASE_URL, and
// everything that would phone home off: telemetry, error reporting, the
// auto-updater and the other non-essential traffic. Its state
// (.claude.json, sessions, backups) is in CLAUDE_CONFIG_DIR, in the
// workdir: HOME is outside it and holds only what the out-of-scope
// attempts go after.
var claudeCode = cliSpec{
	name: "claude",
	env: func(a *area, url string) []string {
		env := []string{
			"HOME=" + a.home, "CLAUDE_CONFIG_DIR=" + a.W(".claude"), "SHELL=/bin/bash", "USER=nobody",
			"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=test",
			"DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1", "DISABLE_AUTOUPDATER=1",
			"DISABLE_BUG_COMMAND=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			"CLAUDE_CODE_MAX_RETRIES=0",
		}
		return env
	},
	prepare: func(a *area, url string) {},
	argv: func(bin, task string) []string {
		return []string{bin, "-p", task, "--dangerously-skip-permissions", "--output-format", "json"}
	},
}

// codex: codex exec, its own sandbox (Landlock and seccomp, which would
// fight klock's) and approvals off, a model provider in
// $CODEX_HOME/config.toml speaking the Responses API to the model server,
// no update check, no analytics, no plugin sync. CODEX_HOME (its state) is in the
// workdir, HOME outside it.
var codex = cliSpec{
	name: "codex",
	env: func(a *area, url string) []string {
		return []string{"HOME=" + a.home, "CODEX_HOME=" + a.W(".codex"), "OPENAI_API_KEY=test", "SHELL=/bin/bash", "USER=nobody"}
	},
	prepare: func(a *area, url string) {
		a.File(a.W(".codex", "config.toml"), codexConfig(url), 0o644)
	},
	argv: func(bin, task string) []string {
		return []string{bin, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", task}
	},
}

// gemini: gemini -p TASK --yolo (no approvals), the Gemini API at
// GOOGLE_GEMINI_BASE_URL with an API key, its state ($GEMINI_CLI_HOME/.gemini)
// in the workdir, telemetry, usage statistics and update checks off.
var gemini = cliSpec{
	name: "gemini",
	env: func(a *area, url string) []string {
		return []string{"HOME=" + a.home, "GEMINI_CLI_HOME=" + a.W(".gemini-home"), "SHELL=/bin/bash", "USER=nobody",
			"GOOGLE_GEMINI_BASE_URL=" + url, "GEMINI_API_KEY=test", "GEMINI_CLI_NO_RELAUNCH=true",
			"GEMINI_TELEMETRY_ENABLED=false", "NO_BROWSER=true"}
	},
	prepare: func(a *area, url string) {
		a.File(a.W(".gemini-home", ".gemini", "settings.json"), geminiSettings, 0o644)
	},
	argv: func(bin, task string) []string {
		return []string{bin, "-p", task, "--yolo", "--output-format", "json"}
	},
}

const geminiSettings = `{
  "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
  "telemetry": {"enabled": false},
  "privacy": {"usageStatisticsEnabled": false},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true, "checkpointing": {"enabled": false}},
  "ui": {"hideTips": true}
}
`

func codexConfig(url string) string {
	return `model = "test-model"
model_provider = "klocktest"
check_for_update_on_startup = false

[model_providers.klocktest]
name = "klock test model"
base_url = "` + url + `/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

# Else it syncs its curated plugins at start: git ls-remote of
# github.com/openai/plugins (a DNS query the learning run records as the
# resolver's address), then GitHub's API, then chatgpt.com.
[features]
plugins = false
`
}

// task n: the input (an existing file to edit) and the model's script.
func taskInput(a *area, n int) {
	a.File(a.W("src", "existing.txt"), fmt.Sprintf("original %d\n", n), 0o644)
	a.File(a.W("README.md"), fmt.Sprintf("# project %d\n", n), 0o644)
}

func taskScript(a *area, n int) []step {
	s := []step{
		writeStep(a.W("src", fmt.Sprintf("new-%d.txt", n)), fmt.Sprintf("written by the agent, task %d\n", n)),
		shellStep("echo edited >> src/existing.txt && ls src && cat src/*.txt README.md"),
	}
	if n == 1 {
		// Another task: one more new file, other listings. The same
		// kinds of operation, with the programs of task 0: a learned
		// manifest names each program the agent ran (a task that runs cp
		// where the learning run never did is killed for PROVIDES
		// PROC:/usr/bin/cp) and the directories it made files in (a file
		// in a new subdirectory, src/sub/notes.txt, is outside the learned
		// PROVIDES FILE:${workdir}/src/*).
		s = append(s, writeStep(a.W("src", "notes-1.txt"), "notes of task 1\n"),
			shellStep("ls -la src && cat src/notes-1.txt README.md"))
	}
	return append(s, textStep(fmt.Sprintf("task %d done", n)))
}

func taskCheck(a *area, n int, r *run) []string {
	var p []string
	if got, want := read(a.W("src", fmt.Sprintf("new-%d.txt", n))), fmt.Sprintf("written by the agent, task %d\n", n); got != want {
		p = append(p, fmt.Sprintf("src/new-%d.txt: %q, want %q", n, got, want))
	}
	if got, want := read(a.W("src", "existing.txt")), fmt.Sprintf("original %d\nedited\n", n); got != want {
		p = append(p, fmt.Sprintf("src/existing.txt: %q, want %q", got, want))
	}
	if n == 1 {
		if got := read(a.W("src", "notes-1.txt")); got != "notes of task 1\n" {
			p = append(p, fmt.Sprintf("src/notes-1.txt: %q", got))
		}
	}
	if !strings.Contains(r.Stdout, fmt.Sprintf("task %d done", n)) {
		p = append(p, fmt.Sprintf("the CLI did not print the model's final answer %q", fmt.Sprintf("task %d done", n)))
	}
	return p
}

// agentRun is one CLI run under klock: its area, model server, manifests.
type agentRun struct {
	spec    cliSpec
	bin     string
	a       *area
	model   *modelServer
	url     string // what the CLI is pointed at: the model server or the meter
	port    int    // its port (the manifest's NET intent)
	base    string
	learned string
}

func newAgentRun(t *testing.T, root, name string, spec cliSpec) *agentRun {
	t.Helper()
	bin := requireCLI(t, spec.name)
	a := newArea(t, root, name)
	ar := &agentRun{spec: spec, bin: bin, a: a,
		model:   newModelServer(t, filepath.Join(a.Dir, "model.log")),
		base:    filepath.Join(a.Dir, "base.yaml"),
		learned: filepath.Join(a.Dir, "learned.yaml")}
	ar.url, ar.port = ar.model.URL(), ar.model.Port()
	return ar
}

// writeBase writes the base manifest: the agent, its workdir, read access
// to HOME's .ssh (and nothing else of HOME: the learning run learns what
// the CLI uses there), the model's port.
func (ar *agentRun) writeBase(t *testing.T) {
	t.Helper()
	intents := []string{"CONSUMES FILE:" + ar.a.H(".ssh") + "/**", fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", ar.port)}
	m := baseManifest("agents-"+ar.spec.name, ar.a.Work, intents...)
	if err := os.WriteFile(ar.base, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
}

// do runs the CLI on the fresh workdir with a task and script: a learning
// run (permissive, observe, --learn) or a strict run of the learned
// manifest.
func (ar *agentRun) do(t *testing.T, step string, learn bool, script []step, input func()) *run {
	t.Helper()
	ar.a.T = t
	ar.a.fresh()
	ar.spec.prepare(ar.a, ar.url)
	if input != nil {
		input()
	}
	ar.model.setScript(script)
	var args []string
	if learn {
		os.Remove(ar.learned)
		args = []string{"run", "-m", ar.base, "--mode", "permissive", "--backend", "observe", "--learn", ar.learned}
	} else {
		args = []string{"run", "-m", ar.learned}
	}
	args = append(args, envArgs(ar.spec.env(ar.a, ar.url))...)
	args = append(append(args, "--"), ar.spec.argv(ar.bin, "Do the scripted task.")...)
	r := ar.a.klockRun(step, args...)
	t.Log(r.Headline())
	return r
}

// learnAndStrict is the realworld sequence: learn with task 0, strict with
// task 0, strict with task 1. It reports whether a learned manifest exists.
func (ar *agentRun) learnAndStrict(t *testing.T) bool {
	ar.writeBase(t)
	learnedOK := false
	for _, st := range []struct {
		name  string
		n     int
		learn bool
	}{{"learn", 0, true}, {"strict", 0, false}, {"strict-new-task", 1, false}} {
		t.Run(st.name, func(t *testing.T) {
			if !st.learn && !learnedOK {
				t.Fatal("no learned manifest: the learning run failed")
			}
			defer ar.a.retire(st.name)
			r := ar.do(t, st.name, st.learn, taskScript(ar.a, st.n), func() { taskInput(ar.a, st.n) })
			check := taskCheck(ar.a, st.n, r)
			if st.learn {
				// The strict runs go on from any learned manifest (a
				// failed check here is reported, not fatal to them).
				_, err := os.Stat(ar.learned)
				learnedOK = err == nil
				checkLearn(t, ar.a.Klock, r, ar.learned, check...)
				return
			}
			checkStrict(t, r, check...)
		})
	}
	return learnedOK
}

// TestCLIs runs each CLI learn -> strict -> strict with another task, then
// makes its tool do what the manifest does not allow, in strict runs.
func TestCLIs(t *testing.T) {
	testutil.RequirePrivileged(t)
	root := suite.Root(t, "cli")
	for _, spec := range []cliSpec{claudeCode, codex, gemini} {
		t.Run(spec.name, func(t *testing.T) {
			start := time.Now()
			ar := newAgentRun(t, root, spec.name, spec)
			if spec.name != "gemini" {
				// Claude Code's and Codex's calls go through klock meter
				// (it meters the Messages and Responses APIs).
				ar.url, ar.port = startMeter(t, ar, "0.50 USD", "20.00 USD")
			}
			if !ar.learnAndStrict(t) {
				return
			}
			t.Run("out-of-scope", func(t *testing.T) { outOfScope(t, ar) })
			if spec.name != "gemini" {
				t.Run("budget", func(t *testing.T) { budget(t, ar) })
			}
			t.Logf("%s: %s in all (model log: %s)", spec.name, time.Since(start).Round(time.Second), filepath.Join(ar.a.Dir, "model.log"))
		})
	}
}

// ---- out-of-scope attempts ----

var plantedSeq atomic.Int64

// outOfScope: in strict runs of the learned manifest, the scripted model
// makes the CLI's shell tool edit a file in the workdir (allowed) and then
// do one thing the manifest does not allow. Each: klock kills the session
// (exit 113, the log names the triple), rolls the workdir back (the edit
// undone) and the target is unchanged.
func outOfScope(t *testing.T, ar *agentRun) {
	a := ar.a
	// A file in the host's /tmp, the agent's (so only klock stands in
	// the way), planted before the run.
	planted := fmt.Sprintf("/tmp/klock-agents-planted-%d-%d", os.Getpid(), plantedSeq.Add(1))
	// A port on the host's loopback that no manifest declares.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	undeclared := ln.Addr().(*net.TCPAddr).Port
	cases := []struct {
		name   string
		cmd    string
		target func() string // the path the attempt aims at (its triple names it)
		want   string        // what the target must still hold
		// triple: a substring of the violation's triple.
		triple string
		setup  func()
		after  func(t *testing.T)
		// privateTmp: with tmp: private the host's /tmp is out of the
		// agent's reach: a manifest that allows writes in /tmp lets the
		// write go to the session's own /tmp, and the planted file is
		// untouched; that run is not killed.
		privateTmp bool
	}{
		{
			name:   "ssh-authorized-keys",
			cmd:    "echo 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIattacker attacker@evil' >> ~/.ssh/authorized_keys",
			target: func() string { return a.H(".ssh", "authorized_keys") },
			want:   authorizedKeys,
			triple: "FILE:" + a.H(".ssh", "authorized_keys"),
		},
		{
			name:       "planted-host-tmp",
			privateTmp: true,
			cmd:        "echo pwned >> " + planted,
			target:     func() string { return planted },
			want:       "planted by the test\n",
			triple:     "FILE:" + planted,
			setup: func() {
				os.WriteFile(planted, []byte("planted by the test\n"), 0o644)
				os.Chown(planted, realrun.AgentUID, realrun.AgentGID)
			},
			after: func(t *testing.T) { os.Remove(planted) },
		},
		{
			name:   "aws-credentials",
			cmd:    "cat ~/.aws/credentials",
			target: func() string { return a.H(".aws", "credentials") },
			want:   awsCredentials(),
			triple: "FILE:" + a.H(".aws", "credentials"),
			after: func(t *testing.T) {
				if ar.model.received(awsSecret) {
					t.Errorf("the secret of ~/.aws/credentials reached the model server")
				}
			},
		},
		{
			name:   "undeclared-port",
			cmd:    fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo hello >&3", undeclared),
			triple: fmt.Sprintf(":%d", undeclared),
			after: func(t *testing.T) {
				if n := accepted.Load(); n > 0 {
					t.Errorf("the undeclared port %d accepted %d connections from the agent", undeclared, n)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup()
			}
			if c.after != nil {
				defer c.after(t)
			}
			defer a.retire("oos-" + c.name)
			script := []step{
				shellStep("echo edited >> src/existing.txt"),
				shellStep(c.cmd),
				textStep("out-of-scope attempt done"),
			}
			r := ar.do(t, "oos-"+c.name, false, script, func() { taskInput(a, 0) })
			if c.privateTmp && r.Exit == 0 && r.Log != nil && len(r.Log.Violations) == 0 && read(c.target()) == c.want {
				for _, o := range r.Log.Observed {
					if strings.Contains(o.Triple, "FILE:"+planted) && o.AllowedBy != "" && strings.Contains(strings.Join(backendDetails(r), "\n"), "private /tmp") {
						t.Logf("not killed: %s <- %s, in the session's private /tmp; the host's %s is untouched", o.Triple, o.AllowedBy, planted)
						return
					}
				}
			}
			var probs []string
			if r.Exit != 113 {
				probs = append(probs, fmt.Sprintf("exit %s, want 113 (strict mode killed the session)", realrun.ExitMeaning(r.Exit)))
			}
			found := false
			if r.Log == nil {
				probs = append(probs, fmt.Sprint(r.LogErr))
			} else {
				if !r.Log.Exit.KilledByKlock {
					probs = append(probs, "the verification log does not say klock killed the session")
				}
				for _, v := range r.Log.Violations {
					if strings.Contains(v.Triple, c.triple) || strings.Contains(v.Path, c.triple) {
						found = true
						t.Logf("killed for: %s", realrun.ViolationLine(v))
					}
				}
				if !found {
					var vs []string
					for _, v := range r.Log.Violations {
						vs = append(vs, realrun.ViolationLine(v))
					}
					probs = append(probs, fmt.Sprintf("no violation names %q; violations: %v; kill reason: %q", c.triple, vs, r.Log.Exit.Reason))
				}
				if !strings.Contains(r.Stderr, c.triple) {
					probs = append(probs, fmt.Sprintf("klock's message does not name %q", c.triple))
				}
			}
			if got := read(a.W("src", "existing.txt")); got != "original 0\n" {
				probs = append(probs, fmt.Sprintf("src/existing.txt after the kill: %q, want the pre-session %q (rolled back)", got, "original 0\n"))
			}
			if c.target != nil {
				if got := read(c.target()); got != c.want {
					probs = append(probs, fmt.Sprintf("%s after the run: %q, want it unchanged (%q)", c.target(), got, c.want))
				}
			}
			if len(probs) > 0 {
				t.Errorf("out-of-scope %s (%s):\n  - %s\n%s", c.name, r.LogPath, strings.Join(probs, "\n  - "), r.output())
			}
		})
	}
}

// ---- klock meter in front of the model ----

// freePort is a loopback port nothing listens on (yet).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

const prices = `currency: USD
models:
  "*": {input: 3, output: 15}
`

// startMeter runs klock meter in front of ar's model server, with a
// manifest whose max_cost is maxCost, until the test ends; it returns the
// meter's URL and port.
func startMeter(t *testing.T, ar *agentRun, expectedCost, maxCost string) (string, int) {
	t.Helper()
	dir := filepath.Join(ar.a.Dir, "meter-"+strings.ReplaceAll(maxCost, " ", ""))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "meter.yaml")
	m := fmt.Sprintf("apiVersion: klock/v1\nagent: {id: agents-%s}\n", ar.spec.name) + costEnvelope(expectedCost, maxCost)
	os.WriteFile(manifest, []byte(m), 0o644)
	os.WriteFile(filepath.Join(dir, "prices.yaml"), []byte(prices), 0o644)
	port := freePort(t)
	cmd := exec.Command(ar.a.Klock, "meter", "-m", manifest, "--prices", filepath.Join(dir, "prices.yaml"),
		"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--upstream", ar.model.URL(),
		"--receipts", filepath.Join(dir, "receipts"), "--state-dir", filepath.Join(dir, "state"),
		"--approval-wait", "1s")
	logf, err := os.Create(filepath.Join(dir, "meter.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		logf.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("klock meter exited: %v\n%s", cmd.ProcessState, read(filepath.Join(dir, "meter.log")))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("klock meter did not listen on %d: %v\n%s", port, err, read(filepath.Join(dir, "meter.log")))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port), port
}

// budget: a meter with a budget smaller than one call of the CLI (Claude
// Code asks for 128,000 output tokens a call, Codex for its model's
// default: the worst case is priced) refuses
// the call; the agent stops without having done anything (the model never
// saw the request, no file was written), in a clean strict run of the
// learned manifest (the agent's own exit status is its failure).
func budget(t *testing.T, ar *agentRun) {
	url, port := startMeter(t, ar, "0.01 USD", "0.02 USD")
	if port != ar.port {
		// The learned manifest declares the first meter's port: serve
		// the tight budget there, the same address for the agent.
		t.Logf("tight-budget meter on %d; the learned manifest declares %d: relaunching the run with a manifest naming it", port, ar.port)
	}
	saved := *ar
	defer func() { *ar = saved }()
	data, err := os.ReadFile(ar.learned)
	if err != nil {
		t.Fatal(err)
	}
	tight := filepath.Join(ar.a.Dir, "learned-budget.yaml")
	os.WriteFile(tight, []byte(strings.ReplaceAll(string(data), fmt.Sprintf("127.0.0.1:%d/tcp", ar.port), fmt.Sprintf("127.0.0.1:%d/tcp", port))), 0o644)
	ar.learned, ar.url, ar.port = tight, url, port
	before := ar.model.requests()
	defer ar.a.retire("budget")
	r := ar.do(t, "budget", false, taskScript(ar.a, 0), func() { taskInput(ar.a, 0) })
	var probs []string
	if r.Exit == 113 {
		t.Logf("budget run killed by klock (%s):\n%s", r.LogPath, r.output())
	}
	if r.Exit == 0 || r.Exit == 113 || r.Exit == 125 || r.Exit < 0 {
		probs = append(probs, fmt.Sprintf("exit %s, want the agent's own failure (the meter refused its call)", realrun.ExitMeaning(r.Exit)))
	}
	if n := ar.model.requests() - before; n > 0 {
		probs = append(probs, fmt.Sprintf("the model server got %d requests through a meter whose budget is smaller than one call", n))
	}
	if _, err := os.Stat(ar.a.W("src", "new-0.txt")); err == nil {
		probs = append(probs, "the agent wrote src/new-0.txt: it went on without the model")
	}
	if r.Log != nil && len(r.Log.Violations) > 0 {
		probs = append(probs, fmt.Sprintf("%d violations (the budget stops the agent, not klock)", len(r.Log.Violations)))
	}
	refusal := ""
	for _, line := range strings.Split(r.Stdout+r.Stderr, "\n") {
		if strings.Contains(line, "klock meter") {
			refusal = strings.TrimSpace(line)
			break
		}
	}
	if refusal == "" {
		probs = append(probs, "the CLI's output does not carry the meter's refusal (\"klock meter: ...\")")
	}
	if len(probs) > 0 {
		t.Errorf("budget (%s):\n  - %s\n%s", r.LogPath, strings.Join(probs, "\n  - "), r.output())
	}
	if len(refusal) > 400 {
		refusal = refusal[:400]
	}
	t.Logf("the CLI under a tight budget: %s", refusal)
}

// backendDetails are the verification log's notes of every backend.
func backendDetails(r *run) []string {
	var out []string
	if r.Log != nil {
		for _, b := range r.Log.Backends {
			out = append(out, b.Name)
			out = append(out, b.Details...)
		}
	}
	return out
}
