package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/klocklabs/klock/enforcer/oci"
)

// TestMain runs the test binary as klock-runtime when asked, with its
// paths pointed into the test's directories, so the tests below run the
// real main (argv parsing, exec) without root and without touching /etc
// or /run.
func TestMain(m *testing.M) {
	if os.Getenv("KLOCK_RUNTIME_AS_MAIN") == "1" {
		configPath = os.Getenv("T_CONFIG")
		stateRoot = os.Getenv("T_STATE")
		dir := os.Getenv("T_EXE_DIR")
		exeDir = func() string { return dir }
		if d, ok := os.LookupEnv("T_RUNTIME_DIRS"); ok {
			runtimeDirs = filepath.SplitList(d)
		}
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeRuntime records its argv (NUL-separated) and the config.json it
// sees, and exits 0.
const fakeRuntime = `#!/bin/sh
printf '%s\0' "$@" > "$T_OUT/argv"
if [ -f "$T_BUNDLE/config.json" ]; then cp "$T_BUNDLE/config.json" "$T_OUT/config.seen"; fi
exit 0
`

type env struct {
	t                                 *testing.T
	dir, bundle, out, state, exe, cfg string
	runtime                           string
}

func newEnv(t *testing.T, spec string) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir()}
	e.bundle = filepath.Join(e.dir, "bundle")
	e.out = filepath.Join(e.dir, "out")
	e.state = filepath.Join(e.dir, "run", "klock", "containers")
	e.exe = filepath.Join(e.dir, "bin")
	e.cfg = filepath.Join(e.dir, "runtime.yaml")
	e.runtime = filepath.Join(e.dir, "fake-runc")
	for _, d := range []string{e.bundle, e.out, e.exe, filepath.Join(e.bundle, "rootfs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, e.runtime, fakeRuntime, 0o755)
	write(t, filepath.Join(e.exe, "klock"), "#!/bin/sh\nexit 0\n", 0o755)
	write(t, filepath.Join(e.exe, "klock-stage2"), "#!/bin/sh\n# stage 2\n", 0o755)
	if spec != "" {
		write(t, filepath.Join(e.bundle, "config.json"), spec, 0o644)
	}
	return e
}

func write(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// run runs klock-runtime with args in dir (the cwd); it returns the exit
// code and stderr.
func (e *env) run(args ...string) (int, string) {
	e.t.Helper()
	return e.runEnv(nil, args...)
}

// runEnv is run with more environment (PATH=... replaces the default).
func (e *env) runEnv(extra []string, args ...string) (int, string) {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = e.bundle
	cmd.Env = append(append(os.Environ(), "KLOCK_RUNTIME_AS_MAIN=1", "T_CONFIG="+e.cfg, "T_STATE="+e.state,
		"T_EXE_DIR="+e.exe, "T_OUT="+e.out, "T_BUNDLE="+e.bundle, "PATH=/usr/bin:/bin"), extra...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), stderr.String()
		}
		e.t.Fatal(err)
	}
	return 0, stderr.String()
}

// argv is what the fake runtime was given (nil when it did not run).
func (e *env) argv() []string {
	data, err := os.ReadFile(filepath.Join(e.out, "argv"))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
}

func (e *env) seen() *specs.Spec {
	e.t.Helper()
	data, err := os.ReadFile(filepath.Join(e.out, "config.seen"))
	if err != nil {
		e.t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		e.t.Fatal(err)
	}
	return &s
}

// specJSON is a spec as an engine writes it (indented, a key order of its
// own) so byte-for-byte means byte for byte.
func specJSON(annotations map[string]string) string {
	s := map[string]any{
		"ociVersion": "1.0.2-dev",
		"process": map[string]any{"terminal": false, "user": map[string]any{"uid": 0, "gid": 0}, "args": []string{"sh", "-c", "echo hi"},
			"cwd": "/workspace", "capabilities": map[string]any{"bounding": []string{"CAP_KILL"}, "effective": []string{"CAP_KILL"}, "permitted": []string{"CAP_KILL"}}},
		"root": map[string]any{"path": "rootfs"},
		"mounts": []any{
			map[string]any{"destination": "/proc", "type": "proc", "source": "proc"},
			map[string]any{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "mode=755"}},
			map[string]any{"destination": "/workspace", "type": "bind", "source": "/srv/repo", "options": []string{"rbind", "rw"}},
			map[string]any{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
		},
		"linux": map[string]any{"namespaces": []any{map[string]any{"type": "mount"}, map[string]any{"type": "pid"}}},
	}
	if annotations != nil {
		s["annotations"] = annotations
	}
	b, _ := json.MarshalIndent(s, "", "\t")
	return string(b) + "\n"
}

func manifest(extra ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: klock/v1\nagent: {id: test-agent, version: 1.0.0, owner: {team: t}}\nworkdir: /workspace\nintents:\n  - CONSUMES FILE:${workdir}/**\n  - MUTATES FILE:${workdir}/**\n")
	for _, x := range extra {
		b.WriteString("  - " + x + "\n")
	}
	b.WriteString("cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.5, expected_cost: \"0.01 USD\", max_cost: \"0.02 USD\"}\n")
	return b.String()
}

// TestPassThrough: every command other than create and run reaches the
// runtime with exactly the argv klock-runtime was given, global flags
// included, minus --runtime-path in either form.
func TestPassThrough(t *testing.T) {
	for _, args := range [][]string{
		{"state", "c1"},
		{"--root", "/run/runc", "--log", "/tmp/x.log", "--log-format=json", "--systemd-cgroup", "kill", "c1", "SIGKILL"},
		{"--debug", "-root=/r", "--criu", "/usr/sbin/criu", "--rootless", "auto", "delete", "--force", "c1"},
		{"exec", "--tty", "c1", "sh", "-c", "a b\tc", "--runtime-path=/not/ours"},
		{"start", "c1"}, {"features"}, {"ps", "c1"}, {"events", "--stats", "c1"}, {"pause", "c1"}, {"resume", "c1"},
		{"update", "--memory", "1M", "c1"}, {"checkpoint", "c1"}, {"restore", "c1"}, {"spec"}, {"list"}, {"--version"},
		{},
	} {
		for _, form := range []string{"eq", "space", "after"} {
			e := newEnv(t, "")
			var given []string
			switch form {
			case "eq":
				given = append([]string{"--runtime-path=" + e.runtime}, args...)
			case "space":
				given = append([]string{"--runtime-path", e.runtime}, args...)
			case "after": // after the other global flags, before the command
				n := 0
				for n < len(args) && strings.HasPrefix(args[n], "-") && args[n] != "--version" {
					n++
					if n < len(args) && !strings.HasPrefix(args[n], "-") && n < len(args)-1 && isValueFlag(args[n-1]) {
						n++
					}
				}
				given = append(append(append([]string{}, args[:n]...), "--runtime-path="+e.runtime), args[n:]...)
			}
			code, stderr := e.run(given...)
			if code != 0 {
				t.Fatalf("%q: exit %d: %s", given, code, stderr)
			}
			got := e.argv()
			want := args
			if len(want) == 0 {
				want = []string{""} // the fake's printf writes one empty field for no arguments
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q (%s): runtime got %q; want %q", given, form, got, want)
			}
		}
	}
}

func isValueFlag(a string) bool {
	name, _, has := flagName(a)
	return valueFlags[name] && !has
}

// TestCreateWithoutManifest: the bundle is untouched, not even rewritten
// with the same bytes (same inode), and the runtime gets the same argv.
func TestCreateWithoutManifest(t *testing.T) {
	for _, cmd := range []string{"create", "run"} {
		e := newEnv(t, specJSON(map[string]string{"other": "x"}))
		cfgFile := filepath.Join(e.bundle, "config.json")
		before, _ := os.ReadFile(cfgFile)
		st1, _ := os.Stat(cfgFile)
		args := []string{"--runtime-path", e.runtime, "--root", "/run/runc", cmd, "--bundle", e.bundle, "--pid-file", "/tmp/p", "c1"}
		if code, stderr := e.run(args...); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		after, _ := os.ReadFile(cfgFile)
		st2, _ := os.Stat(cfgFile)
		if !bytes.Equal(before, after) || !os.SameFile(st1, st2) || st1.ModTime() != st2.ModTime() {
			t.Fatal("config.json changed")
		}
		if got := e.argv(); !reflect.DeepEqual(got, args[2:]) {
			t.Fatalf("argv %q", got)
		}
		if _, err := os.Stat(e.state); err == nil {
			t.Fatal("a state directory was made for a container without a manifest")
		}
	}
}

// TestCreateRewrites: a manifest named by the annotation (path or inline)
// or by runtime.yaml rewrites config.json before the runtime reads it.
func TestCreateRewrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ann    func(manifestPath string) map[string]string
		config func(manifestPath string) string
		args   func(e *env) []string
		id     string
	}{
		{name: "annotation path, --bundle x",
			ann: func(p string) map[string]string { return map[string]string{oci.AnnotationManifest: p} },
			args: func(e *env) []string {
				return []string{"--runtime-path=" + e.runtime, "create", "--bundle", e.bundle, "c1"}
			}, id: "c1"},
		{name: "inline, --bundle=x, run -d",
			ann: func(string) map[string]string { return map[string]string{oci.AnnotationManifest: manifest()} },
			args: func(e *env) []string {
				return []string{"--log", filepath.Join(e.dir, "l"), "--runtime-path", e.runtime, "run", "-d", "--bundle=" + e.bundle, "--console-socket", "/tmp/s", "agent.1"}
			}, id: "agent.1"},
		{name: "runtime.yaml mapping, -b, cwd",
			config: func(p string) string { return "manifests:\n  - match: {id: \"agent-*\"}\n    manifest: " + p + "\n" },
			args: func(e *env) []string {
				return []string{"--runtime-path", e.runtime, "create", "--no-new-keyring", "agent-7"}
			}, id: "agent-7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			mpath := filepath.Join(e.dir, "m.yaml")
			write(t, mpath, manifest(), 0o644)
			var ann map[string]string
			if tc.ann != nil {
				ann = tc.ann(mpath)
			}
			write(t, filepath.Join(e.bundle, "config.json"), specJSON(ann), 0o640)
			if tc.config != nil {
				write(t, e.cfg, tc.config(mpath), 0o644)
			}
			args := tc.args(e)
			if code, stderr := e.run(args...); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var want []string
			for i := 0; i < len(args); i++ {
				switch {
				case args[i] == "--runtime-path":
					i++
				case strings.HasPrefix(args[i], "--runtime-path="):
				default:
					want = append(want, args[i])
				}
			}
			if got := e.argv(); !reflect.DeepEqual(got, want) {
				t.Fatalf("argv %q; want %q", got, want)
			}
			s := e.seen()
			stateDir := filepath.Join(e.state, tc.id)
			if s.Annotations[oci.AnnotationRuntime] != oci.RuntimeFull || s.Process.Args[0] != oci.Stage2Path ||
				s.Process.User.UID != oci.NobodyID || !s.Process.NoNewPrivileges || s.Linux.Seccomp == nil {
				t.Fatalf("spec not rewritten: %+v", s.Process)
			}
			if tc.ann == nil && s.Annotations[oci.AnnotationManifest] != mpath {
				t.Fatalf("runtime.yaml's manifest is not the annotation: %v", s.Annotations)
			}
			if len(s.Hooks.CreateRuntime) != 1 || s.Hooks.CreateRuntime[0].Path != filepath.Join(e.exe, "klock") {
				t.Fatalf("hooks %+v", s.Hooks)
			}
			var bound bool
			for _, m := range s.Mounts {
				bound = bound || (m.Destination == oci.StageDir && m.Source == stateDir)
			}
			if !bound {
				t.Fatalf("state dir not bound: %+v", s.Mounts)
			}
			if st, err := os.Stat(filepath.Join(stateDir, "klock-stage2")); err != nil || st.Mode().Perm() != 0o755 {
				t.Fatalf("klock-stage2 in the state dir: %v", err)
			}
			if st, _ := os.Stat(e.state); st.Mode().Perm() != 0o700 {
				t.Fatalf("state root mode %v", st.Mode())
			}
			if st, _ := os.Stat(filepath.Join(e.bundle, "config.json")); st.Mode().Perm() != 0o640 {
				t.Fatalf("config.json mode %v; want the original 0640", st.Mode())
			}
			if leftovers, _ := filepath.Glob(filepath.Join(e.bundle, ".config.json.klock-*")); len(leftovers) != 0 {
				t.Fatalf("temporary files left: %v", leftovers)
			}
		})
	}
}

// TestCreateRefuses: the runtime never runs, config.json is untouched,
// and the error goes to stderr and (in runc's JSON) to the --log file.
func TestCreateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ann      map[string]string
		config   string
		manifest string
		prep     func(e *env)
		want     string
	}{
		{name: "required", config: "require: true\n", want: "a klock manifest is required"},
		{name: "invalid manifest", manifest: strings.Replace(manifest(), "workdir:", "bogus: 1\nworkdir:", 1), want: "m.yaml:3:1"},
		{name: "unreachable", manifest: manifest("MUTATES FILE:/tmp/**"), want: "MUTATES FILE:/tmp/** (container path /tmp)"},
		{name: "no stage2", manifest: manifest(), prep: func(e *env) { os.Remove(filepath.Join(e.exe, "klock-stage2")) }, want: "klock-stage2 is neither beside klock-runtime"},
		{name: "bad config", config: "requier: true\n", want: "runtime.yaml:1:1: unknown field"},
		{name: "bad id", manifest: manifest(), want: "container id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			ann := tc.ann
			if tc.manifest != "" {
				mpath := filepath.Join(e.dir, "m.yaml")
				write(t, mpath, tc.manifest, 0o644)
				ann = map[string]string{oci.AnnotationManifest: mpath}
			}
			spec := specJSON(ann)
			write(t, filepath.Join(e.bundle, "config.json"), spec, 0o644)
			if tc.config != "" {
				write(t, e.cfg, tc.config, 0o644)
			}
			if tc.prep != nil {
				tc.prep(e)
			}
			id := "c1"
			if tc.name == "bad id" {
				id = "../evil"
			}
			logFile := filepath.Join(e.dir, "runc.log")
			code, stderr := e.run("--log", logFile, "--log-format", "json", "--runtime-path", e.runtime, "create", "--bundle", e.bundle, id)
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr, tc.want)
			}
			if e.argv() != nil {
				t.Fatal("the runtime ran")
			}
			if got, _ := os.ReadFile(filepath.Join(e.bundle, "config.json")); string(got) != spec {
				t.Fatal("config.json changed")
			}
			data, err := os.ReadFile(logFile)
			if err != nil {
				t.Fatal(err)
			}
			var line struct{ Level, Msg, Time string }
			if err := json.Unmarshal(data, &line); err != nil || line.Level != "error" || !strings.Contains(line.Msg, tc.want) || line.Time == "" {
				t.Fatalf("log %q: %v", data, err)
			}
			if entries, _ := os.ReadDir(e.state); len(entries) != 0 {
				t.Fatalf("state left behind: %v", entries)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	e := newEnv(t, "")
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "KLOCK_RUNTIME_AS_MAIN=1", "T_CONFIG="+e.cfg)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"io.klock.manifest", "runtime.yaml", "daemon.json", "podman run --runtime", "BinaryName", "crio.runtime.runtimes", "RuntimeClass"} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("%q: help does not mention %s", args, want)
			}
		}
	}
	// "create --help" is runc's.
	if code, _ := e.run("--runtime-path", e.runtime, "create", "--help"); code != 0 || !reflect.DeepEqual(e.argv(), []string{"create", "--help"}) {
		t.Fatalf("create --help: %d %q", code, e.argv())
	}
}

func TestLogLine(t *testing.T) {
	if got := string(logLine("text", `a "b"`, mustTime(t))); got != `time="2026-11-25T18:00:00Z" level=error msg="a \"b\""`+"\n" {
		t.Fatalf("text: %s", got)
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args          []string
		cmd, rt, log  string
		help          bool
		bundle, id    string
		bundleErr     bool
		passedThrough []string
	}{
		{args: []string{"--root", "/r", "create", "-b", "/b", "id1"}, cmd: "create", bundle: "/b", id: "id1"},
		{args: []string{"--log=/l", "--runtime-path=/rt", "run", "--pid-file", "/p", "--bundle=/b", "--keep", "x"}, cmd: "run", rt: "/rt", log: "/l", bundle: "/b", id: "x",
			passedThrough: []string{"--log=/l", "run", "--pid-file", "/p", "--bundle=/b", "--keep", "x"}},
		{args: []string{"create", "--console-socket", "/s", "id"}, cmd: "create", bundle: ".", id: "id"},
		{args: []string{"create", "--bundle"}, cmd: "create", bundleErr: true},
		{args: []string{"create"}, cmd: "create", bundleErr: true},
		{args: []string{"--help"}, help: true},
		{args: []string{"--debug", "help"}, cmd: "help", help: true},
		{args: []string{"kill", "--help"}, cmd: "kill"},
	} {
		inv, err := parseArgs(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if inv.command != tc.cmd || inv.runtimePath != tc.rt || inv.log != tc.log || inv.help != tc.help {
			t.Errorf("%q: %+v", tc.args, inv)
		}
		if tc.passedThrough != nil && !reflect.DeepEqual(inv.argv, tc.passedThrough) {
			t.Errorf("%q: argv %q", tc.args, inv.argv)
		}
		if tc.cmd == "create" || tc.cmd == "run" {
			b, id, err := bundleAndID(inv.args)
			if (err != nil) != tc.bundleErr || (err == nil && (b != tc.bundle || id != tc.id)) {
				t.Errorf("%q: bundle %q id %q err %v", tc.args, b, id, err)
			}
		}
	}
	if _, err := parseArgs([]string{"--runtime-path"}); err == nil {
		t.Error("--runtime-path without a value accepted")
	}
}

// TestRuntimeIsNotSelf: a runtime_path that is klock-runtime itself would
// exec itself forever.
func TestRuntimeIsNotSelf(t *testing.T) {
	e := newEnv(t, "")
	self, _ := os.Executable()
	link := filepath.Join(e.dir, "runc")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	code, stderr := e.run("--runtime-path", link, "state", "c1")
	if code != 1 || !strings.Contains(stderr, "klock-runtime itself") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// TestRuntimeChoice: with nothing said klock-runtime runs runc, else
// crun when runc is missing; --runtime and runtime.yaml's runtime: name
// one; a chosen runtime that is missing is an error naming what to
// install, and so is a host with neither.
func TestRuntimeChoice(t *testing.T) {
	e := newEnv(t, "")
	only := func(names ...string) string {
		d := t.TempDir()
		for _, n := range names {
			write(t, filepath.Join(d, n), "#!/bin/sh\necho "+n+" > \"$T_OUT/which\"\n", 0o755)
		}
		return d
	}
	for _, tc := range []struct {
		name     string
		path     string
		config   string
		args     []string
		want     string // the runtime that ran, or "" for an error
		wantErrs []string
	}{
		{name: "default runc", path: only("runc", "crun"), want: "runc"},
		{name: "probe crun", path: only("crun"), want: "crun"},
		{name: "flag crun", path: only("runc", "crun"), args: []string{"--runtime=crun"}, want: "crun"},
		{name: "config crun", path: only("runc", "crun"), config: "runtime: crun\n", want: "crun"},
		{name: "flag over config", path: only("runc", "crun"), config: "runtime: crun\n", args: []string{"--runtime", "runc"}, want: "runc"},
		{name: "chosen missing", path: only("runc"), args: []string{"--runtime=crun"}, wantErrs: []string{"crun (the chosen OCI runtime)", "apt-get install crun"}},
		{name: "neither", path: only(), wantErrs: []string{"neither runc nor crun", "apt-get install runc", "apt-get install crun"}},
		{name: "unknown", path: only("runc"), args: []string{"--runtime=youki"}, wantErrs: []string{"--runtime=youki: want one of runc, crun"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(filepath.Join(e.out, "which"))
			os.Remove(e.cfg)
			if tc.config != "" {
				write(t, e.cfg, tc.config, 0o644)
			}
			code, stderr := e.runEnv([]string{"PATH=" + tc.path, "T_RUNTIME_DIRS="}, append(tc.args, "state", "c1")...)
			got, _ := os.ReadFile(filepath.Join(e.out, "which"))
			if tc.want != "" {
				if code != 0 || strings.TrimSpace(string(got)) != tc.want {
					t.Fatalf("exit %d, ran %q, want %s: %s", code, got, tc.want, stderr)
				}
				return
			}
			for _, w := range tc.wantErrs {
				if code != 1 || len(got) != 0 || !strings.Contains(stderr, w) {
					t.Fatalf("exit %d, ran %q: %s\nwant an error saying %q", code, got, stderr, w)
				}
			}
		})
	}
}

// hookRuntime is a runtime whose poststop hook ends the session as
// T_OUTCOME says (written into the outcome file klock-runtime made, then
// the state directory removed, as klock oci-hook does) and whose
// container exits T_CODE: the order runc run keeps (the hooks run before
// it returns).
const hookRuntime = `#!/bin/sh
printf '%s\0' "$@" > "$T_OUT/argv"
d="$T_STATE/$T_ID"
[ -f "$d/outcome.json" ] && touch "$T_OUT/outcome-made"
[ -n "$T_OUTCOME" ] && [ -f "$d/outcome.json" ] && printf '%s' "$T_OUTCOME" > "$d/outcome.json"
rm -rf "$d"
exit $T_CODE
`

// TestRunReportsKill: run of a klock container exits 137 when the
// session was killed, also when the container had exited 0 by itself
// before the kill landed; any other end is the runtime's own status, and
// run -d (which returns at start) execs the runtime as before.
func TestRunReportsKill(t *testing.T) {
	killed := `{"session":"s1","killed":true,"reason":"ScopeViolationError: x","log":"/w/.klock/sessions/s1/verification.json"}`
	for _, tc := range []struct {
		name, outcome, code string
		detach              bool
		want                int
		made                bool
	}{
		{name: "killed after its own exit 0", outcome: killed, code: "0", want: 137, made: true},
		{name: "killed after its own exit 1", outcome: killed, code: "1", want: 137, made: true},
		{name: "killed while running", outcome: killed, code: "137", want: 137, made: true},
		{name: "clean", outcome: `{"session":"s1"}`, code: "3", want: 3, made: true},
		{name: "interrupted from outside", outcome: `{"session":"s1","killed":true,"interrupted":true}`, code: "0", want: 0, made: true},
		{name: "no session", code: "1", want: 1, made: true},
		{name: "detached", outcome: killed, code: "0", detach: true, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			write(t, e.runtime, hookRuntime, 0o755)
			mpath := filepath.Join(e.dir, "m.yaml")
			write(t, mpath, manifest(), 0o644)
			write(t, filepath.Join(e.bundle, "config.json"), specJSON(map[string]string{oci.AnnotationManifest: mpath}), 0o644)
			t.Setenv("T_ID", "c1")
			t.Setenv("T_OUTCOME", tc.outcome)
			t.Setenv("T_CODE", tc.code)
			args := []string{"--runtime-path", e.runtime, "run", "--bundle", e.bundle, "c1"}
			if tc.detach {
				args = []string{"--runtime-path", e.runtime, "run", "--bundle", e.bundle, "--detach", "c1"}
			}
			code, stderr := e.run(args...)
			if code != tc.want {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.want, stderr)
			}
			if got := e.argv(); !reflect.DeepEqual(got, args[2:]) {
				t.Fatalf("argv %q; want %q", got, args[2:])
			}
			if _, err := os.Stat(filepath.Join(e.out, "outcome-made")); (err == nil) != tc.made {
				t.Fatalf("outcome file made: %v, want %v", err == nil, tc.made)
			}
			if tc.want == 137 && !strings.Contains(stderr, "killed by klock (session s1)") {
				t.Fatalf("stderr does not say klock killed it: %q", stderr)
			}
		})
	}
}

func TestDetached(t *testing.T) {
	for args, want := range map[string]bool{
		"c1": false, "-d c1": true, "--detach c1": true, "--detach=true c1": true, "--detach=false c1": false,
		"--bundle -d c1": false, "--bundle b -d c1": true, "--pid-file=/p --keep c1": false, "-- -d": false,
	} {
		if got := detached(strings.Fields(args)); got != want {
			t.Errorf("detached(%q) = %v, want %v", args, got, want)
		}
	}
}

// TestLinkStage2: containers share one copy of klock-stage2 (hard links:
// no 3.5 MB write a container), byte for byte the installed binary; a new
// install gets a new copy, and a container made before keeps the binary
// it had.
func TestLinkStage2(t *testing.T) {
	dir := t.TempDir()
	old := stateRoot
	stateRoot = filepath.Join(dir, "state")
	t.Cleanup(func() { stateRoot = old })
	src := filepath.Join(dir, "klock-stage2")
	write(t, src, "#!/bin/sh\n# v1\n", 0o755)
	a, err := makeStateDir("a", src)
	if err != nil {
		t.Fatal(err)
	}
	b, err := makeStateDir("b", src)
	if err != nil {
		t.Fatal(err)
	}
	sa, _ := os.Stat(filepath.Join(a, "klock-stage2"))
	sb, _ := os.Stat(filepath.Join(b, "klock-stage2"))
	if sa == nil || sb == nil || !os.SameFile(sa, sb) || sa.Mode().Perm() != 0o755 {
		t.Fatalf("a's and b's klock-stage2 are not one 0755 file: %v %v", sa, sb)
	}
	// A new install (a new file renamed over the old, as make install does).
	write(t, src+".new", "#!/bin/sh\n# v2, longer\n", 0o755)
	if err := os.Rename(src+".new", src); err != nil {
		t.Fatal(err)
	}
	c, err := makeStateDir("c", src)
	if err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]string{a: "# v1", c: "# v2"} {
		got, err := os.ReadFile(filepath.Join(d, "klock-stage2"))
		if err != nil || !strings.Contains(string(got), want) {
			t.Fatalf("%s: %q, %v; want %s", d, got, err, want)
		}
	}
	// Containers a and b deleted, a third install: v1's copy, which no
	// container links, goes (the state root is memory); v2's, which c
	// links, stays.
	for _, d := range []string{a, b} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	write(t, src+".new", "#!/bin/sh\n# v3, longer still\n", 0o755)
	if err := os.Rename(src+".new", src); err != nil {
		t.Fatal(err)
	}
	if _, err := makeStateDir("d", src); err != nil {
		t.Fatal(err)
	}
	copies, _ := filepath.Glob(filepath.Join(stateRoot, "klock-stage2@*"))
	var kept []string
	for _, p := range copies {
		b, _ := os.ReadFile(p)
		kept = append(kept, strings.TrimSpace(strings.SplitN(string(b), "\n", 3)[1]))
	}
	slices.Sort(kept)
	if want := []string{"# v2, longer", "# v3, longer still"}; !slices.Equal(kept, want) {
		t.Fatalf("shared copies after the third install: %q, want %q", kept, want)
	}
}
