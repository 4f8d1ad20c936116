//go:build linux

package realworld

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/klocklabs/klock/test/internal/realrun"
)

func workloads() []workload {
	return append([]workload{gitWorkload(), pythonWorkload(), pytestWorkload(), nodeWorkload(), cWorkload(), shellWorkload(), goWorkload()}, toolWorkloads()...)
}

func noEnv(*world) []string { return nil }

// need returns an error naming what is missing from out.
func need(out string, wants ...string) error {
	var miss []string
	for _, w := range wants {
		if !strings.Contains(out, w) {
			miss = append(miss, fmt.Sprintf("%q", w))
		}
	}
	if len(miss) > 0 {
		return fmt.Errorf("the agent's output lacks %s", strings.Join(miss, ", "))
	}
	return nil
}

func readRel(w *world, rel string) (string, error) {
	b, err := os.ReadFile(w.W(rel))
	return string(b), err
}

// ---- git: init, add, commit, branch, diff, stash ----

var gitInput = []struct{ msg, readme, code, change string }{
	{"first commit of project A", "# Project A\n", "alpha\nbeta\n", "gamma (A's change)"},
	{"project B: a different first commit", "# Project B\nwith more text, so every object differs\n", "one\ntwo\nthree\n", "four (B's change)"},
}

func gitWorkload() workload {
	return workload{
		name:  "git",
		needs: []string{"git"},
		env:   noEnv,
		input: func(t *testing.T, w *world, n int) {
			in := gitInput[n]
			w.file(".gitignore", ".klock/\nhome/\n*.out\n", 0o644)
			w.file("README.md", in.readme, 0o644)
			w.file("src/code.txt", in.code, 0o644)
			w.file("commit-msg.txt", in.msg+"\n", 0o644)
			w.file("change.txt", in.change+"\n", 0o644)
		},
		script: `set -eu
cd "$WORKDIR"
git init -q -b main .
git config user.name "Real World Agent"
git config user.email agent@example.com
git add -A
git commit -q -F commit-msg.txt
git branch feature
git checkout -q feature
cat change.txt >> src/code.txt
git diff > change.out
git diff --stat
git stash push -q -m "wip: change"
git stash list
git checkout -q main
echo "commits: $(git rev-list --all --count)"
`,
		check: func(w *world, n int, r *run) error {
			git := func(args ...string) (string, error) {
				out, err := exec.Command("git", append([]string{"-c", "safe.directory=*", "-C", w.Work}, args...)...).CombinedOutput()
				if err != nil {
					return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
				}
				return strings.TrimSpace(string(out)), nil
			}
			msg, err := git("log", "-1", "--format=%s", "main")
			if err != nil {
				return err
			}
			if msg != gitInput[n].msg {
				return fmt.Errorf("main's commit is %q, want %q", msg, gitInput[n].msg)
			}
			if _, err := git("rev-parse", "--verify", "-q", "refs/heads/feature"); err != nil {
				return fmt.Errorf("no branch feature: %v", err)
			}
			stash, err := git("stash", "list")
			if err != nil {
				return err
			}
			if !strings.Contains(stash, "wip: change") {
				return fmt.Errorf("stash list is %q, want the agent's stash", stash)
			}
			// The stash holds the change; the work tree is clean again.
			show, err := git("stash", "show", "-p", "stash@{0}")
			if err != nil {
				return err
			}
			if !strings.Contains(show, gitInput[n].change) {
				return fmt.Errorf("the stash lacks the change %q: %s", gitInput[n].change, show)
			}
			if d, _ := readRel(w, "change.out"); !strings.Contains(d, gitInput[n].change) {
				return fmt.Errorf("git diff did not show the change: change.out = %q", d)
			}
			if status, err := git("status", "--porcelain"); err != nil || status != "" {
				return fmt.Errorf("work tree not clean after the stash: %q %v", status, err)
			}
			return need(r.Stdout, "1 file changed", "stash@{0}", "commits: 3") // main, and the stash's two (work tree and index)
		},
	}
}

// ---- Python: venv with ensurepip, pip install of a local wheel, pytest ----

var pyInput = []struct{ version, greeting, test string }{
	{"1.0", "hello from greet 1.0", `import greet

def test_hello():
    print("captured by pytest")
    assert greet.hello() == "hello from greet 1.0"
`},
	{"2.1", "greetings from greet 2.1", `import greet
import pytest

def test_hello():
    print("captured by pytest")
    assert greet.hello().startswith("greetings")

@pytest.mark.parametrize("n", [1, 2, 3])
def test_shout(n, capsys):
    print("x" * n)
    assert greet.shout(n) == "GREETINGS" + "!" * n
    assert capsys.readouterr().out == "x" * n + "\n"
`},
}

// wheel builds greet-<version>-py3-none-any.whl: a zip with the package,
// METADATA, WHEEL and a RECORD of sha256 hashes, as pip expects.
func wheel(t *testing.T, version, greeting string) (name string, data []byte) {
	t.Helper()
	dist := "greet-" + version + ".dist-info"
	files := []struct{ name, body string }{
		{"greet/__init__.py", fmt.Sprintf("def hello():\n    return %q\n\n\ndef shout(n):\n    return hello().split()[0].upper() + \"!\" * n\n", greeting)},
		{dist + "/METADATA", "Metadata-Version: 2.1\nName: greet\nVersion: " + version + "\nSummary: a greeting for klock's real-world suite\n"},
		{dist + "/WHEEL", "Wheel-Version: 1.0\nGenerator: klock-realworld-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{dist + "/top_level.txt", "greet\n"},
	}
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		fw, err := z.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", dist)
	fw, err := z.Create(dist + "/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return "greet-" + version + "-py3-none-any.whl", buf.Bytes()
}

func pythonWorkload() workload {
	return workload{
		name: "python",
		// Debian's python3 (python3-venv, python3-pip, python3-pytest), on the
		// agent's PATH before anything in a user's own PATH.
		needs: []string{"/usr/bin/python3"},
		prepare: func(t *testing.T, w *world) {
			for _, mod := range []string{"ensurepip", "venv", "pytest", "pip"} {
				if err := exec.Command("/usr/bin/python3", "-c", "import "+mod).Run(); err != nil {
					pkg := map[string]string{"ensurepip": "python3-venv", "venv": "python3-venv", "pytest": "python3-pytest", "pip": "python3-pip"}[mod]
					t.Fatalf("/usr/bin/python3 cannot import %s: install %s (scripts/deps.sh realworld)", mod, pkg)
				}
			}
		},
		env: noEnv,
		input: func(t *testing.T, w *world, n int) {
			in := pyInput[n]
			name, data := wheel(t, in.version, in.greeting)
			w.file("dist/"+name, string(data), 0o644)
			w.file("tests/test_greet.py", in.test, 0o644)
		},
		// pytest comes from the system site (--system-site-packages) and runs
		// with its default output capture (a TemporaryFile per test).
		script: `set -eu
cd "$WORKDIR"
python3 -m venv --system-site-packages venv
venv/bin/python -m pip install --no-index dist/greet-*.whl
venv/bin/python -m pytest tests
venv/bin/python -c 'import greet; print("imported:", greet.hello())'
`,
		check: func(w *world, n int, r *run) error {
			in := pyInput[n]
			site := filepath.Join("venv", "lib", "python3*", "site-packages")
			for _, pat := range []string{filepath.Join("venv", "bin", "pip"), filepath.Join(site, "greet", "__init__.py"), filepath.Join(site, "greet-"+in.version+".dist-info", "INSTALLER")} {
				if m, _ := filepath.Glob(w.W(pat)); len(m) == 0 {
					return fmt.Errorf("%s is missing from the workdir", pat)
				}
			}
			passed := "1 passed"
			if n == 1 {
				passed = "4 passed"
			}
			return need(r.Stdout, "Successfully installed greet-"+in.version, passed, "imported: "+in.greeting)
		},
	}
}

// ---- pytest alone: Debian's pytest on the system python, default capture ----
//
// The python workload runs pytest last, after the venv and pip; this one
// runs it alone, so what pytest needs is reported even when the venv fails.

var pytestInput = []map[string]string{
	{
		"calc.py": "def add(a, b):\n    return a + b\n",
		"tests/test_calc.py": `import calc

def test_add(tmp_path):
    print("captured output")
    (tmp_path / "note.txt").write_text("a note")
    assert calc.add(2, 3) == 5
`,
	},
	{
		"calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
		"tests/test_calc.py": `import sys
import calc
import pytest

@pytest.mark.parametrize("a,b", [(1, 2), (3, 4)])
def test_mul(a, b, tmp_path, capsys):
    print("captured", a, b)
    sys.stderr.write("to stderr\n")
    (tmp_path / "out.txt").write_text(str(calc.mul(a, b)))
    assert calc.mul(a, b) == a * b
    assert capsys.readouterr().out == "captured %d %d\n" % (a, b)
`,
		"tests/test_more.py": "import calc\n\ndef test_add():\n    assert calc.add(1, 1) == 2\n",
	},
}

func pytestWorkload() workload {
	return workload{
		name:  "pytest",
		needs: []string{"/usr/bin/python3"},
		prepare: func(t *testing.T, w *world) {
			if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
				t.Fatalf("/usr/bin/python3 cannot import pytest: install python3-pytest (scripts/deps.sh realworld)")
			}
		},
		env: noEnv,
		input: func(t *testing.T, w *world, n int) {
			for rel, body := range pytestInput[n] {
				w.file(rel, body, 0o644)
			}
		},
		script: `set -eu
cd "$WORKDIR"
python3 -m pytest -p no:randomly --rootdir=. tests
`,
		check: func(w *world, n int, r *run) error {
			return need(r.Stdout, []string{"1 passed", "3 passed"}[n])
		},
	}
}

// ---- Node: npm install of a local package tarball ----

var nodeInput = []struct{ version, greeting string }{
	{"1.0.0", "hello from greet 1.0.0"},
	{"2.3.0", "greetings from greet 2.3.0"},
}

func nodeWorkload() workload {
	return workload{
		name:  "node",
		needs: []string{"node", "npm"},
		// The tarballs: npm pack of a tiny package, one per input.
		prepare: func(t *testing.T, w *world) {
			for _, in := range nodeInput {
				pkg := filepath.Join(w.in, "greet-src-"+in.version)
				os.MkdirAll(pkg, 0o755)
				os.WriteFile(filepath.Join(pkg, "package.json"), []byte(fmt.Sprintf(`{"name": "greet", "version": %q, "main": "index.js", "license": "MIT"}`+"\n", in.version)), 0o644)
				os.WriteFile(filepath.Join(pkg, "index.js"), []byte(fmt.Sprintf("exports.hello = () => %q;\n", in.greeting)), 0o644)
				cmd := exec.Command("npm", "pack", "--pack-destination", w.in, "--loglevel=error")
				cmd.Dir = pkg
				cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(w.in, "npm-cache"), "npm_config_update_notifier=false")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("npm pack %s: %v\n%s", pkg, err, out)
				}
			}
		},
		env: noEnv,
		input: func(t *testing.T, w *world, n int) {
			in := nodeInput[n]
			tgz := "greet-" + in.version + ".tgz"
			w.copyIn(filepath.Join(w.in, tgz), "vendor/"+tgz)
			w.file("app/package.json", `{"name": "app", "version": "1.0.0", "private": true}`+"\n", 0o644)
			w.file("app/main.js", "console.log('greet says: ' + require('greet').hello());\n", 0o644)
		},
		script: `set -eu
cd "$WORKDIR/app"
npm install --no-audit --no-fund ../vendor/greet-*.tgz
node main.js
`,
		check: func(w *world, n int, r *run) error {
			in := nodeInput[n]
			pj, err := readRel(w, "app/node_modules/greet/package.json")
			if err != nil {
				return fmt.Errorf("greet is not installed: %v", err)
			}
			if !strings.Contains(pj, `"version": "`+in.version+`"`) {
				return fmt.Errorf("installed greet is not %s: %s", in.version, pj)
			}
			if app, _ := readRel(w, "app/package.json"); !strings.Contains(app, "greet-"+in.version+".tgz") {
				return fmt.Errorf("app/package.json does not depend on the tarball: %s", app)
			}
			return need(r.Stdout, "greet says: "+in.greeting)
		},
	}
}

// ---- C: make, run, make clean, make, run again ----

const cMakefile = `CC ?= gcc
SRCS := $(sort $(wildcard src/*.c))
OBJS := $(patsubst src/%.c,build/%.o,$(SRCS))

build/hello: $(OBJS)
	$(CC) -o $@ $^

build/%.o: src/%.c src/msg.h | build
	$(CC) -O1 -Wall -c -o $@ $<

build:
	mkdir -p build

clean:
	rm -rf build

.PHONY: clean
`

var cInput = []struct {
	msg   string
	files map[string]string
}{
	{"hello from C input A", map[string]string{
		"src/hello.c": "#include <stdio.h>\n#include \"msg.h\"\nint main(void) { puts(MSG); return 0; }\n",
	}},
	{"hello from C input B", map[string]string{
		"src/hello.c":  "#include <stdio.h>\n#include \"msg.h\"\nconst char *msg(void);\nint main(void) { printf(\"%s (%d)\\n\", msg(), 42); return 0; }\n",
		"src/extra.c":  "#include \"msg.h\"\nconst char *msg(void) { return MSG; }\n",
		"src/notes.md": "B has two translation units\n",
	}},
}

func cWorkload() workload {
	return workload{
		name:  "c",
		needs: []string{"gcc", "make"},
		env:   noEnv,
		input: func(t *testing.T, w *world, n int) {
			in := cInput[n]
			w.file("Makefile", cMakefile, 0o644)
			w.file("src/msg.h", fmt.Sprintf("#define MSG %q\n", in.msg), 0o644)
			for rel, body := range in.files {
				w.file(rel, body, 0o644)
			}
		},
		script: `set -eu
cd "$WORKDIR"
make
echo "run 1: $(./build/hello)"
make clean
make
echo "run 2: $(./build/hello)"
`,
		check: func(w *world, n int, r *run) error {
			if _, err := os.Stat(w.W("build", "hello")); err != nil {
				return fmt.Errorf("build/hello: %v", err)
			}
			msg := cInput[n].msg
			return need(r.Stdout, "run 1: "+msg, "run 2: "+msg)
		},
	}
}

// ---- shell: sed -i, tar, find, grep -r, xargs, mktemp ----

var shellInput = []map[string]string{
	{
		"data/a.txt":     "the colour red\nno match here\n",
		"data/b.txt":     "colour and colour\n",
		"data/sub/c.txt": "a colour below\n",
		"data/plain.txt": "nothing\n",
	},
	{
		"data/x.txt":            "colour x\n",
		"data/deep/er/y.txt":    "colour y\n",
		"data/deep/z.txt":       "no colours? yes: colour\n",
		"data/other/w.txt":      "plain w\n",
		"data/other/colour.txt": "colour in a file named colour\n",
	},
}

func shellWorkload() workload {
	return workload{
		name:  "shell",
		needs: []string{"sed", "tar", "find", "grep", "xargs", "mktemp", "sort"},
		env:   noEnv,
		input: func(t *testing.T, w *world, n int) {
			for rel, body := range shellInput[n] {
				w.file(rel, body, 0o644)
			}
		},
		// sed -i in place in the input tree and in a tree the run made
		// itself (out/, extracted from the tar); mktemp in /tmp.
		script: `set -eu
cd "$WORKDIR"
find data -type f -name '*.txt' -print0 | xargs -0 sed -i 's/colour/color/g'
list=$(mktemp)
scratch=$(mktemp -d)
grep -rl color data | sort > "$list"
tar -cf "$scratch/data.tar" data
mkdir -p out
tar -xf "$scratch/data.tar" -C out
find out/data -type f -name '*.txt' | xargs sed -i 's/color/COLOR/g'
find out/data -type f | sort > out/files.txt
cp "$list" out/matches.txt
rm -rf "$list" "$scratch"
echo "matches: $(wc -l < out/matches.txt)"
`,
		check: func(w *world, n int, r *run) error {
			var matches, files []string
			for rel, body := range shellInput[n] {
				got, err := readRel(w, rel)
				if err != nil {
					return err
				}
				want := strings.ReplaceAll(body, "colour", "color")
				if got != want {
					return fmt.Errorf("%s = %q, want %q (sed -i)", rel, got, want)
				}
				if strings.Contains(want, "color") {
					matches = append(matches, rel)
				}
				out, err := readRel(w, "out/"+rel)
				if err != nil {
					return fmt.Errorf("not extracted: %v", err)
				}
				if wantOut := strings.ReplaceAll(want, "color", "COLOR"); out != wantOut {
					return fmt.Errorf("out/%s = %q, want %q (sed -i in the extracted tree)", rel, out, wantOut)
				}
				files = append(files, "out/"+rel)
			}
			sort.Strings(matches)
			sort.Strings(files)
			if got, _ := readRel(w, "out/matches.txt"); got != strings.Join(matches, "\n")+"\n" {
				return fmt.Errorf("out/matches.txt = %q, want %q (grep -r)", got, strings.Join(matches, "\n")+"\n")
			}
			if got, _ := readRel(w, "out/files.txt"); got != strings.Join(files, "\n")+"\n" {
				return fmt.Errorf("out/files.txt = %q, want %q (find)", got, strings.Join(files, "\n")+"\n")
			}
			return need(r.Stdout, fmt.Sprintf("matches: %d", len(matches)))
		},
	}
}

// ---- Go: go build, go vet, go test ----

var goInput = []map[string]string{
	{
		"go.mod":       "module example.com/greet\n\ngo 1.22\n",
		"main.go":      "package main\n\nimport \"fmt\"\n\nfunc Greeting() string { return \"hello from Go input A\" }\n\nfunc main() { fmt.Println(Greeting()) }\n",
		"main_test.go": "package main\n\nimport \"testing\"\n\nfunc TestGreeting(t *testing.T) {\n\tif Greeting() != \"hello from Go input A\" {\n\t\tt.Fatal(Greeting())\n\t}\n}\n",
	},
	{
		"go.mod":                       "module example.com/greet\n\ngo 1.22\n",
		"main.go":                      "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/greet/internal/shout\"\n)\n\nfunc Greeting() string { return shout.Up(\"hello from Go input B\") }\n\nfunc main() { fmt.Println(Greeting()) }\n",
		"main_test.go":                 "package main\n\nimport \"testing\"\n\nfunc TestGreeting(t *testing.T) {\n\tif Greeting() != \"HELLO FROM GO INPUT B\" {\n\t\tt.Fatal(Greeting())\n\t}\n}\n",
		"internal/shout/shout.go":      "package shout\n\nimport \"strings\"\n\n// Up shouts.\nfunc Up(s string) string { return strings.ToUpper(s) }\n",
		"internal/shout/shout_test.go": "package shout\n\nimport \"testing\"\n\nfunc TestUp(t *testing.T) {\n\tif Up(\"a\") != \"A\" {\n\t\tt.Fatal(Up(\"a\"))\n\t}\n}\n",
	},
}

var goWant = []string{"hello from Go input A", "HELLO FROM GO INPUT B"}

// goBinDir is the directory of the go toolchain this test runs with.
func goBinDir() string {
	if p, err := exec.LookPath("go"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(r)
		}
	}
	return "/usr/local/go/bin"
}

// goEnv is the agent's Go environment: the toolchain on PATH, GOCACHE and
// GOPATH in the workdir, no network, no toolchain download.
func goEnv(w *world) []string {
	return []string{
		"PATH=" + goBinDir() + ":" + realrun.AgentPATH,
		"GOCACHE=" + w.W(".cache", "go-build"),
		"GOPATH=" + w.W("go"),
		"GOFLAGS=-mod=mod",
		"GOTOOLCHAIN=local",
		"GOPROXY=off",
	}
}

func goWorkload() workload {
	return workload{
		name:  "go",
		needs: []string{"go"},
		// A warm build cache of the standard library, as a CI cache restore
		// gives: compiling it cold takes ~25 s a run on two cores. It is made
		// by the agent user from another module (same imports), so each run
		// still compiles, vets and tests its own packages.
		prepare: func(t *testing.T, w *world) {
			seed := filepath.Join(w.in, "seed")
			os.MkdirAll(seed, 0o755)
			os.WriteFile(filepath.Join(seed, "go.mod"), []byte("module example.com/seed\n\ngo 1.22\n"), 0o644)
			os.WriteFile(filepath.Join(seed, "main.go"), []byte("package main\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\nfunc main() { fmt.Println(strings.ToUpper(\"seed\")) }\n"), 0o644)
			os.WriteFile(filepath.Join(seed, "main_test.go"), []byte("package main\n\nimport \"testing\"\n\nfunc TestSeed(t *testing.T) {}\n"), 0o644)
			os.MkdirAll(filepath.Join(seed, "tmp"), 0o755)
			realrun.ChownTree(t, w.in)
			env := append([]string{"HOME=" + seed, "TMPDIR=" + filepath.Join(seed, "tmp")}, goEnv(w)...)
			for i, kv := range env {
				if strings.HasPrefix(kv, "GOCACHE=") {
					env[i] = "GOCACHE=" + filepath.Join(seed, "cache")
				} else if strings.HasPrefix(kv, "GOPATH=") {
					env[i] = "GOPATH=" + filepath.Join(seed, "gopath")
				}
			}
			goTool := filepath.Join(goBinDir(), "go")
			asAgent(t, seed, env, goTool, "build", "-o", "seed", ".")
			asAgent(t, seed, env, goTool, "vet", "./...")
			asAgent(t, seed, env, goTool, "test", "-count=1", "./...")
		},
		env: goEnv,
		input: func(t *testing.T, w *world, n int) {
			for rel, body := range goInput[n] {
				w.file(rel, body, 0o644)
			}
			w.copyIn(filepath.Join(w.in, "seed", "cache"), ".cache/go-build")
		},
		script: `set -eu
cd "$WORKDIR"
go build -o bin/greet .
./bin/greet
go vet ./...
go test -count=1 ./...
`,
		check: func(w *world, n int, r *run) error {
			if _, err := os.Stat(w.W("bin", "greet")); err != nil {
				return fmt.Errorf("bin/greet: %v", err)
			}
			wants := []string{goWant[n], "ok  \texample.com/greet\t"}
			if n == 1 {
				wants = append(wants, "ok  \texample.com/greet/internal/shout\t")
			}
			return need(r.Stdout, wants...)
		},
	}
}
