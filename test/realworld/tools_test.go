//go:build linux

package realworld

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/test/internal/realrun"
)

// The workloads below use the tools the way agents do beyond the first
// set (workloads_test.go): pip building and installing a local project
// (regular, editable, a wheel), npm with a local tarball, a local
// directory dependency, scripts and npm ci, make with parallel jobs,
// recursion and an install into a prefix outside the workdir, the shell's
// file tools (sed -i with a backup, awk, find -exec, tar with gzip, cp -a,
// mv, ln -s, chmod, touch -d), git from clone to am with hooks, and go with
// its caches where a fresh account has them, in a home outside the
// workdir.
func toolWorkloads() []workload {
	return []workload{pipProjectWorkload(), npmProjectWorkload(), makeInstallWorkload(), fileToolsWorkload(), gitFlowWorkload(), goHomeWorkload()}
}

// ---- pip: a local project, editable install, a wheel, uninstall, byte-compile ----

var pipProjectInput = []struct{ version, msg string }{
	{"1.0", "hello from mylib one"},
	{"2.0", "greetings from mylib two"},
}

func pipProjectWorkload() workload {
	return workload{
		name:  "pip-project",
		needs: []string{"/usr/bin/python3"},
		prepare: func(t *testing.T, w *world) {
			for _, mod := range []string{"ensurepip", "venv", "pip", "setuptools"} {
				if err := exec.Command("/usr/bin/python3", "-c", "import "+mod).Run(); err != nil {
					t.Fatalf("/usr/bin/python3 cannot import %s (scripts/deps.sh realworld)", mod)
				}
			}
		},
		env: noEnv,
		input: func(t *testing.T, w *world, n int) {
			in := pipProjectInput[n]
			w.file("pkg/pyproject.toml", fmt.Sprintf(`[build-system]
requires = ["setuptools>=40.8"]
build-backend = "setuptools.build_meta"

[project]
name = "mylib"
version = %q
`, in.version), 0o644)
			w.file("pkg/src/mylib/__init__.py", fmt.Sprintf("def msg():\n    return %q\n", in.msg), 0o644)
			if n == 1 {
				w.file("pkg/src/mylib/extra.py", "VALUE = 42\n", 0o644)
			}
		},
		// No index: setuptools comes from the system site
		// (--system-site-packages, --no-build-isolation).
		script: `set -eu
cd "$WORKDIR"
python3 -m venv --system-site-packages venv
venv/bin/pip install --no-index --no-build-isolation ./pkg
venv/bin/python -c 'import mylib; print("installed:", mylib.msg())'
venv/bin/pip uninstall -y mylib
venv/bin/pip install --no-index --no-build-isolation -e ./pkg
venv/bin/python -c 'import mylib; print("editable:", mylib.msg())'
venv/bin/pip wheel --no-index --no-build-isolation --no-deps -w dist ./pkg
venv/bin/pip uninstall -y mylib
venv/bin/pip install --no-index dist/mylib-*.whl
venv/bin/python -m compileall -q venv/lib
venv/bin/python -c 'import mylib; print("wheel:", mylib.msg())'
venv/bin/pip list --format=freeze | grep -i '^mylib=='
`,
		check: func(w *world, n int, r *run) error {
			in := pipProjectInput[n]
			if m, _ := filepath.Glob(w.W("dist", "mylib-"+in.version+"-*.whl")); len(m) == 0 {
				return fmt.Errorf("no wheel mylib-%s in dist/", in.version)
			}
			return need(r.Stdout, "installed: "+in.msg, "editable: "+in.msg, "wheel: "+in.msg, "mylib=="+in.version)
		},
	}
}

// ---- npm: pack, init, a tarball and a directory dependency, scripts, ci ----

var npmProjectInput = []struct{ version, msg string }{
	{"1.0.0", "hi from greetlib one"},
	{"2.0.0", "hi from greetlib two"},
}

func npmProjectWorkload() workload {
	return workload{
		name:  "npm-project",
		needs: []string{"node", "npm"},
		env:   noEnv,
		input: func(t *testing.T, w *world, n int) {
			in := npmProjectInput[n]
			w.file("libsrc/package.json", fmt.Sprintf(`{"name": "greetlib", "version": %q, "main": "index.js", "license": "MIT"}`+"\n", in.version), 0o644)
			w.file("libsrc/index.js", fmt.Sprintf("exports.hi = () => %q;\n", in.msg), 0o644)
			w.file("localdep/package.json", fmt.Sprintf(`{"name": "localdep", "version": "0.1.%d", "main": "index.js", "license": "MIT"}`+"\n", n), 0o644)
			w.file("localdep/index.js", fmt.Sprintf("exports.n = () => %d;\n", n), 0o644)
		},
		script: `set -eu
export npm_config_update_notifier=false npm_config_audit=false npm_config_fund=false
cd "$WORKDIR"
(cd libsrc && npm pack --pack-destination ..)
mkdir app && cd app
npm init -y >/dev/null
npm pkg set scripts.start="node main.js" scripts.build="node build.js"
npm install ../greetlib-*.tgz
npm install ../localdep
echo "console.log('main: ' + require('greetlib').hi() + ' n=' + require('localdep').n());" > main.js
echo "require('fs').mkdirSync('out', {recursive: true}); require('fs').writeFileSync('out/built.txt', 'built ' + require('greetlib').hi());" > build.js
npm run build
npm start
rm -rf node_modules
npm ci
npm start
echo "$(cat out/built.txt)"
`,
		check: func(w *world, n int, r *run) error {
			in := npmProjectInput[n]
			if c := strings.Count(r.Stdout, fmt.Sprintf("main: %s n=%d", in.msg, n)); c != 2 {
				return fmt.Errorf("npm start printed the expected line %d times, want 2 (before and after npm ci)", c)
			}
			if lock, _ := readRel(w, "app/package-lock.json"); !strings.Contains(lock, "greetlib-"+in.version+".tgz") {
				return fmt.Errorf("package-lock.json does not name the tarball: %s", lock)
			}
			return need(r.Stdout, "built "+in.msg)
		},
	}
}

// ---- make: -j2, recursive make, install into a prefix outside the workdir ----

const makeInstallTop = `PREFIX ?= /usr/local
SUBDIRS = lib app
all:
	for d in $(SUBDIRS); do $(MAKE) -C $$d || exit 1; done
install: all
	$(MAKE) -C app install PREFIX=$(PREFIX)
	install -d $(PREFIX)/share/doc/hello
	install -m 644 README $(PREFIX)/share/doc/hello/
clean:
	for d in $(SUBDIRS); do $(MAKE) -C $$d clean; done
.PHONY: all install clean
`

const makeInstallLib = `SRCS := $(sort $(wildcard *.c))
OBJS := $(SRCS:.c=.o)
libmsg.a: $(OBJS)
	$(AR) rcs $@ $^
%.o: %.c
	$(CC) -O1 -c -o $@ $<
clean:
	rm -f *.o *.a
`

const makeInstallApp = `hello: main.o ../lib/libmsg.a
	$(CC) -o $@ main.o -L../lib -lmsg
main.o: main.c
	$(CC) -O1 -c -o $@ $<
install: hello
	install -d $(PREFIX)/bin
	install -m 755 hello $(PREFIX)/bin/hello
clean:
	rm -f hello *.o
`

var makeInstallMsg = []string{"made by input one", "made by input two"}

// prefix is where make install puts the program: outside the workdir,
// made afresh (empty, the agent's) for every step. install -d makes every
// directory of its path, and gets EEXIST for /srv and the like: learned,
// PROVIDES FILE:/srv made the strict run's Landlock wall impossible (125).
func (w *world) prefix() string { return filepath.Join(w.Dir, "prefix") }

func makeInstallWorkload() workload {
	return workload{
		name:  "make-install",
		needs: []string{"gcc", "make", "ar", "install"},
		env:   func(w *world) []string { return []string{"PREFIX=" + w.prefix()} },
		input: func(t *testing.T, w *world, n int) {
			os.RemoveAll(w.prefix())
			if err := os.Mkdir(w.prefix(), 0o755); err != nil {
				t.Fatal(err)
			}
			realrun.ChownTree(t, w.prefix())
			w.file("Makefile", makeInstallTop, 0o644)
			w.file("README", fmt.Sprintf("readme of input %d\n", n), 0o644)
			w.file("lib/Makefile", makeInstallLib, 0o644)
			w.file("lib/msg.c", fmt.Sprintf("const char *msg(void) { return %q; }\n", makeInstallMsg[n]), 0o644)
			for i := 1; i <= 3+2*n; i++ {
				w.file(fmt.Sprintf("lib/f%d.c", i), fmt.Sprintf("int f%d(void) { return %d; }\n", i, i), 0o644)
			}
			w.file("app/Makefile", makeInstallApp, 0o644)
			w.file("app/main.c", "#include <stdio.h>\nconst char *msg(void);\nint f1(void);\nint main(void) { printf(\"%s %d\\n\", msg(), f1()); return 0; }\n", 0o644)
		},
		script: `set -eu
cd "$WORKDIR"
make -j2
make -j2 install PREFIX="$PREFIX"
echo "installed: $("$PREFIX/bin/hello")"
make clean
make -j2 -C lib
ls lib/libmsg.a
`,
		check: func(w *world, n int, r *run) error {
			doc, err := os.ReadFile(filepath.Join(w.prefix(), "share", "doc", "hello", "README"))
			if err != nil || string(doc) != fmt.Sprintf("readme of input %d\n", n) {
				return fmt.Errorf("installed README: %q %v", doc, err)
			}
			if _, err := os.Stat(w.W("app", "hello")); err == nil {
				return fmt.Errorf("app/hello is still there after make clean")
			}
			return need(r.Stdout, "installed: "+makeInstallMsg[n]+" 1", "lib/libmsg.a")
		},
	}
}

// ---- the shell's file tools ----

var fileToolsInput = []map[string]string{
	{"src/a/conf.ini": "name=alpha\nvalue=1\n", "src/b/data.txt": "x 1\ny 2\nz 3\n"},
	{"src/a/conf.ini": "name=beta\nvalue=22\nextra=yes\n", "src/b/data.txt": "p 10\nq 20\n", "src/b/more.txt": "more\n", "src/c/d/deep.txt": "deep\n"},
}

var fileToolsSum = []string{"sum 6", "sum 30"}

func fileToolsWorkload() workload {
	return workload{
		name:  "file-tools",
		needs: []string{"sed", "awk", "find", "tar", "gzip", "cp", "mv", "ln", "chmod", "touch", "install", "sha256sum"},
		env:   noEnv,
		input: func(t *testing.T, w *world, n int) {
			for rel, body := range fileToolsInput[n] {
				w.file(rel, body, 0o644)
			}
			w.Mkdir(w.W("dest"))
		},
		script: `set -eu
cd "$WORKDIR"
sed -i 's/^value=/val=/' src/a/conf.ini
sed -i.bak -e 's/name=/NAME=/' src/a/conf.ini
awk '{s+=$2} END {print "sum", s}' src/b/data.txt > src/b/sum.txt
find src -name '*.txt' -exec sh -c 'wc -l < "$1" > "$1.count"' _ {} \;
find src -name '*.bak' -exec rm {} +
tar -czf dest/src.tgz src
mkdir -p x && tar -xzf dest/src.tgz -C x
cp -a src copy
mv copy/b dest/moved-b
ln -s ../src/a/conf.ini dest/conf-link
ln -sf ../src/b/data.txt dest/data-link
chmod 600 src/a/conf.ini
chmod -R go-w x
touch -d '2020-01-02 03:04:05' src/b/data.txt
touch -r src/b/data.txt dest/src.tgz
mkdir -p dest/sub && mv x/src/b/data.txt dest/sub/ && mv dest/sub dest/sub2
rm -rf x
install -m 0644 src/b/sum.txt dest/sum.txt
echo "link: $(head -1 dest/conf-link)"
cat dest/sum.txt
find dest -type f | sort | xargs sha256sum > manifest.sha
`,
		check: func(w *world, n int, r *run) error {
			conf, _ := readRel(w, "src/a/conf.ini")
			if !strings.HasPrefix(conf, "NAME=") || !strings.Contains(conf, "\nval=") {
				return fmt.Errorf("src/a/conf.ini = %q (sed -i)", conf)
			}
			if _, err := os.Lstat(w.W("src/a/conf.ini.bak")); err == nil {
				return fmt.Errorf("conf.ini.bak survived find -exec rm")
			}
			st, err := os.Stat(w.W("src/a/conf.ini"))
			if err != nil || st.Mode().Perm() != 0o600 {
				return fmt.Errorf("conf.ini mode: %v %v (chmod)", st, err)
			}
			want, _ := time.ParseInLocation("2006-01-02 15:04:05", "2020-01-02 03:04:05", time.Local)
			if st, err := os.Stat(w.W("src/b/data.txt")); err != nil || !st.ModTime().Equal(want) {
				return fmt.Errorf("src/b/data.txt's time: %v (touch -d)", err)
			}
			if l, err := os.Readlink(w.W("dest/conf-link")); err != nil || l != "../src/a/conf.ini" {
				return fmt.Errorf("dest/conf-link: %q %v", l, err)
			}
			for _, p := range []string{"dest/sub2/data.txt", "dest/moved-b/sum.txt", "dest/sum.txt", "manifest.sha"} {
				if _, err := os.Stat(w.W(p)); err != nil {
					return err
				}
			}
			return need(r.Stdout, "link: NAME=", fileToolsSum[n])
		},
	}
}

// ---- git: clone, hooks, branch, merge, rebase, stash, tag, format-patch, am, gc ----

var gitFlowInput = []struct{ file, body string }{
	{"f.txt", "line1\nline2\n"},
	{"g.txt", "other1\nother2\nother3\n"},
}

func gitFlowWorkload() workload {
	return workload{
		name:  "git-flow",
		needs: []string{"git"},
		env:   noEnv,
		// The upstream repository, made by the test as the agent: in the
		// workdir, beside the clone.
		input: func(t *testing.T, w *world, n int) {
			in := gitFlowInput[n]
			w.file("upstream/"+in.file, in.body, 0o644)
			env := []string{"HOME=" + w.W("home"), "PATH=" + realrun.AgentPATH, "GIT_AUTHOR_NAME=Up", "GIT_AUTHOR_EMAIL=up@example.com", "GIT_COMMITTER_NAME=Up", "GIT_COMMITTER_EMAIL=up@example.com"}
			up := w.W("upstream")
			asAgent(t, up, env, "git", "init", "-q", "-b", "main", ".")
			asAgent(t, up, env, "git", "add", "-A")
			asAgent(t, up, env, "git", "commit", "-qm", fmt.Sprintf("upstream initial %d", n))
			asAgent(t, up, env, "git", "tag", fmt.Sprintf("v0.%d", n))
		},
		script: `set -eu
cd "$WORKDIR"
git clone -q upstream clone
cd clone
git config user.name "Agent"
git config user.email agent@example.com
printf '#!/bin/sh\necho "hook: pre-commit ran" >&2\n' > .git/hooks/pre-commit
printf '#!/bin/sh\nsed -i "1s/^/[hooked] /" "$1"\n' > .git/hooks/commit-msg
chmod +x .git/hooks/pre-commit .git/hooks/commit-msg
git checkout -q -b feature
echo "feature work" > feat.txt; git add feat.txt; git commit -qm "add feature"
git checkout -q main
echo "main work" > main.txt; git add main.txt; git commit -qm "main change"
git merge -q --no-edit feature
git checkout -q -b topic HEAD~1
echo "topic" > topic.txt; git add topic.txt; git commit -qm "topic change"
git rebase -q main
echo "wip" >> topic.txt; git stash -q; git stash pop -q; git commit -qam "wip commit"
git tag -a v1.0 -m "release 1.0"
git format-patch -q -2 -o ../patches
git checkout -q -b applied main
git am -q ../patches/*.patch
git gc -q
git fsck >/dev/null 2>&1 && echo fsck-ok
echo "topic: $(git log -1 --format=%s topic)"
echo "described: $(git describe --tags topic)"
echo "applied: $(git log --format=%s -2 applied | tr '\n' '|')"
`,
		check: func(w *world, n int, r *run) error {
			return need(r.Stdout, "fsck-ok", "topic: [hooked] wip commit", "described: v1.0", "applied: wip commit|topic change|")
		},
	}
}

// ---- go: a fresh account's caches, in a home outside the workdir ----

var goHomeInput = []struct{ op, want string }{{"a + b", "5"}, {"a * b", "6"}}

// home is the agent's home for the go-home workload: /home/<name>, outside
// the workdir, kept from step to step as a user's is (the learning run
// finds it empty; the strict runs find the caches it made).
func (w *world) home() string {
	return filepath.Join("/home", "klock-rw-"+filepath.Base(filepath.Dir(w.Dir)))
}

func goHomeWorkload() workload {
	return workload{
		name:  "go-home",
		needs: []string{"go"},
		prepare: func(t *testing.T, w *world) {
			h := w.home()
			os.RemoveAll(h)
			if err := os.MkdirAll(h, 0o755); err != nil {
				t.Fatal(err)
			}
			realrun.ChownTree(t, h)
			t.Cleanup(func() {
				if os.Getenv(suite.KeepEnv) != "1" {
					os.RemoveAll(h)
				}
			})
		},
		// Go's defaults: GOCACHE ~/.cache/go-build, GOMODCACHE
		// ~/go/pkg/mod, telemetry in ~/.config/go. No network, no
		// toolchain download.
		env: func(w *world) []string {
			return []string{"HOME=" + w.home(), "PATH=" + goBinDir() + ":" + realrun.AgentPATH, "GOTOOLCHAIN=local", "GOPROXY=off"}
		},
		input: func(t *testing.T, w *world, n int) {
			in := goHomeInput[n]
			w.file("pkg/calc/calc.go", fmt.Sprintf("package calc\n\n// Op combines two numbers.\nfunc Op(a, b int) int { return %s }\n", in.op), 0o644)
			w.file("pkg/calc/calc_test.go", fmt.Sprintf("package calc\n\nimport \"testing\"\n\nfunc TestOp(t *testing.T) {\n\tif got := Op(2, 3); got != %s {\n\t\tt.Fatal(got)\n\t}\n}\n", in.want), 0o644)
			w.file("cmd/app/main.go", "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/proj/pkg/calc\"\n)\n\nfunc main() { fmt.Println(\"result:\", calc.Op(2, 3)) }\n", 0o644)
		},
		script: `set -eu
cd "$WORKDIR"
go mod init example.com/proj
go vet ./...
go build -o bin/app ./cmd/app
./bin/app
go test -count=1 ./...
go run ./cmd/app
`,
		check: func(w *world, n int, r *run) error {
			want := "result: " + goHomeInput[n].want
			if c := strings.Count(r.Stdout, want); c != 2 {
				return fmt.Errorf("%q printed %d times, want 2 (bin/app and go run)", want, c)
			}
			if _, err := os.Stat(filepath.Join(w.home(), ".cache", "go-build")); err != nil {
				return fmt.Errorf("no build cache in the home: %v", err)
			}
			return need(r.Stdout, "ok  \texample.com/proj/pkg/calc\t")
		},
	}
}
