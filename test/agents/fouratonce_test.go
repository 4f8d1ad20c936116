//go:build linux

package agents

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

// workload is one of the four sessions run at once: its area, how its
// learning and strict runs are made, and its own check.
type workload struct {
	name  string
	a     *area
	base  string
	learn string
	// args are klock run's arguments after -m MANIFEST (env and the
	// command).
	args  func() []string
	input func()
	// script is the model's (the CLIs), nil for the others.
	ar    *agentRun
	check func(r *run) []string
}

// goBuild: go build of a small module, GOCACHE and GOPATH in a HOME next
// to the workdir (kept between runs: a warm cache, as a developer's).
func goBuildWorkload(t *testing.T, root string) *workload {
	goBin := "/usr/local/go/bin/go"
	if _, err := os.Stat(goBin); err != nil {
		testutil.Unavailable(t, "no Go toolchain at "+goBin)
	}
	a := newArea(t, root, "gobuild")
	a.keepHome = true
	w := &workload{name: "go-build", a: a, base: filepath.Join(a.Dir, "base.yaml"), learn: filepath.Join(a.Dir, "learned.yaml")}
	os.WriteFile(w.base, []byte(baseManifest("agents-gobuild", a.Work,
		"CONSUMES FILE:"+a.home+"/**", "PROVIDES FILE:"+a.home+"/**", "MUTATES FILE:"+a.home+"/**",
		"DELETES FILE:"+a.home+"/**", "RENAMES FILE:"+a.home+"/**")), 0o644)
	w.input = func() {
		a.File(a.W("go.mod"), "module example.com/hello\n\ngo 1.22\n", 0o644)
		a.File(a.W("main.go"), "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from go\", 42) }\n", 0o644)
	}
	w.args = func() []string {
		return append(envArgs([]string{"HOME=" + a.home, "GOCACHE=" + a.H(".cache", "go-build"), "GOPATH=" + a.H("go"),
			"GOTOOLCHAIN=local", "GOTELEMETRY=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0", "WORKDIR=" + a.Work}),
			"--", "/bin/sh", "-c", `cd "$WORKDIR" && `+goBin+` build -o hello . && ./hello`)
	}
	w.check = func(r *run) []string {
		if !strings.Contains(r.Stdout, "hello from go 42") {
			return []string{"the built program did not print its line"}
		}
		return nil
	}
	return w
}

// pytest: Debian's python3 -m pytest on a small module, in its workdir.
func pytestWorkload(t *testing.T, root string) *workload {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		testutil.Unavailable(t, "no "+py+" (scripts/deps.sh realworld)")
	}
	a := newArea(t, root, "pytest")
	a.homeInWork = true
	w := &workload{name: "pytest", a: a, base: filepath.Join(a.Dir, "base.yaml"), learn: filepath.Join(a.Dir, "learned.yaml")}
	os.WriteFile(w.base, []byte(baseManifest("agents-pytest", a.Work)), 0o644)
	w.input = func() {
		a.File(a.W("calc.py"), "def add(a, b):\n    return a + b\n", 0o644)
		a.File(a.W("test_calc.py"), "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n\ndef test_neg():\n    assert add(-1, 1) == 0\n", 0o644)
	}
	w.args = func() []string {
		return append(envArgs([]string{"HOME=" + a.W("home"), "WORKDIR=" + a.Work}),
			"--", "/bin/sh", "-c", `cd "$WORKDIR" && `+py+` -m pytest -q`)
	}
	w.check = func(r *run) []string {
		if !strings.Contains(r.Stdout, "2 passed") {
			return []string{"pytest did not report 2 passed"}
		}
		return nil
	}
	return w
}

// cliWorkload: a CLI with task 0 against its scripted model.
func cliWorkload(t *testing.T, root string, spec cliSpec) *workload {
	ar := newAgentRun(t, root, spec.name, spec)
	ar.writeBase(t)
	w := &workload{name: spec.name, a: ar.a, base: ar.base, learn: ar.learned, ar: ar}
	w.input = func() {
		ar.spec.prepare(ar.a, ar.url)
		taskInput(ar.a, 0)
		ar.model.setScript(taskScript(ar.a, 0))
	}
	w.args = func() []string {
		return append(append(envArgs(ar.spec.env(ar.a, ar.url)), "--"), ar.spec.argv(ar.bin, "Do the scripted task.")...)
	}
	w.check = func(r *run) []string { return taskCheck(ar.a, 0, r) }
	return w
}

func (w *workload) run(t *testing.T, step string, learn bool) *run {
	w.a.T = t
	w.a.fresh()
	w.input()
	var args []string
	if learn {
		os.Remove(w.learn)
		args = []string{"run", "-m", w.base, "--mode", "permissive", "--backend", "observe", "--learn", w.learn}
	} else {
		args = []string{"run", "-m", w.learn}
	}
	return w.a.klockRun(step, append(args, w.args()...)...)
}

// TestFourAtOnce: Claude Code, Codex, a Go build and a pytest run, each
// in a workdir of its own, learned one after the other, then strict all at
// once: every one CLEAN, none refused its leases (exit 75).
// KLOCK_AGENTS_REPEAT=N repeats the four-at-once run N times (default 1).
func TestFourAtOnce(t *testing.T) {
	testutil.RequirePrivileged(t)
	repeat := 1
	if s := os.Getenv(repeatEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", repeatEnv, s)
		}
		repeat = n
	}
	root := suite.Root(t, "four")
	ws := []*workload{cliWorkload(t, root, claudeCode), cliWorkload(t, root, codex), goBuildWorkload(t, root), pytestWorkload(t, root)}
	for _, w := range ws {
		ok := t.Run("learn/"+w.name, func(t *testing.T) {
			defer w.a.retire("learn")
			r := w.run(t, "learn", true)
			t.Log(r.Headline())
			checkLearn(t, w.a.Klock, r, w.learn, w.check(r)...)
		})
		if _, err := os.Stat(w.learn); err != nil {
			t.Fatalf("%s: no learned manifest (learn ok=%v)", w.name, ok)
		}
	}
	for i := 1; i <= repeat; i++ {
		runs := make([]*run, len(ws))
		checks := make([][]string, len(ws))
		var wg sync.WaitGroup
		start := time.Now()
		for j, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				step := fmt.Sprintf("strict-%d", i)
				runs[j] = w.run(t, step, false)
				checks[j] = w.check(runs[j])
				w.a.retire(step)
			}()
		}
		wg.Wait()
		t.Logf("four at once, round %d: %s", i, time.Since(start).Round(10*time.Millisecond))
		for j, w := range ws {
			t.Run(fmt.Sprintf("%d/%s", i, w.name), func(t *testing.T) {
				r := runs[j]
				t.Log(r.Headline())
				if r.Exit == 75 {
					t.Errorf("lease conflict (exit 75) with the other sessions:\n%s", r.output())
				}
				checkStrict(t, r, checks[j]...)
			})
		}
	}
}
