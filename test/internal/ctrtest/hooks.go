//go:build linux

package ctrtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// recorderScript is the recording hook: a host /bin/sh script (hooks run in
// the runtime's namespaces, not the container's) that keeps, per call,
// its argv, cwd, environment, the state on stdin, and the cgroup and comm
// of the state's pid while that process still exists.
const recorderScript = `#!/bin/sh
d=$(mktemp -d "$KLOCK_REC_DIR/call.XXXXXX") || exit 1
printf '%s\n' "$@" > "$d/args"
pwd > "$d/cwd"
env > "$d/env"
cat > "$d/state"
pid=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$d/state")
if [ -n "$pid" ]; then
	cat "/proc/$pid/cgroup" > "$d/cgroup" 2>/dev/null
	cat "/proc/$pid/comm" > "$d/comm" 2>/dev/null
fi
touch "$d/done"
[ "${KLOCK_REC_EXIT:-0}" = 0 ] || echo "record-hook: failing with $KLOCK_REC_EXIT as asked" >&2
exit ${KLOCK_REC_EXIT:-0}
`

// Recorder is a recording OCI hook: Hook(stage) is a specs.Hook that
// records each call in Dir, Calls reads them back.
type Recorder struct {
	Path string // the script
	Dir  string // where calls are recorded
}

// HookCall is one recorded call of the hook.
type HookCall struct {
	Stage string   // the first argument after argv[0] (Hook's stage)
	Args  []string // argv, argv[0] included
	Cwd   string
	Env   []string
	State specs.State
	// RawState is stdin as the hook read it.
	RawState string
	// Cgroup and Comm are /proc/<State.Pid>/cgroup and comm read by the
	// hook, empty when the state had no pid.
	Cgroup, Comm string
}

// NewRecorder writes the recording hook into a new temporary directory
// (0755, so a runtime running it as root and a hook run by podman both
// reach it).
func NewRecorder(t testing.TB) *Recorder {
	t.Helper()
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	r := &Recorder{Path: filepath.Join(dir, "record-hook"), Dir: filepath.Join(dir, "calls")}
	must(t, os.Mkdir(r.Dir, 0o755))
	must(t, os.WriteFile(r.Path, []byte(recorderScript), 0o755))
	return r
}

// Hook is the spec hook recording calls under the stage name: argv is
// [record-hook STAGE]. Its Env is explicit (KLOCK_REC_DIR only): a spec
// hook with no env inherits the runtime's environment in runc. Add
// KLOCK_REC_EXIT=N to its Env for a hook that records, says so on stderr
// and exits N.
func (r *Recorder) Hook(stage string) specs.Hook {
	return specs.Hook{Path: r.Path, Args: []string{"record-hook", stage}, Env: []string{"KLOCK_REC_DIR=" + r.Dir}}
}

// Calls are the recorded calls in the order they were made.
func (r *Recorder) Calls(t testing.TB) []HookCall {
	t.Helper()
	ents, err := os.ReadDir(r.Dir)
	must(t, err)
	type rec struct {
		c   HookCall
		mod int64
	}
	var recs []rec
	for _, e := range ents {
		d := filepath.Join(r.Dir, e.Name())
		if _, err := os.Stat(filepath.Join(d, "done")); err != nil {
			continue // still running, or it died before the end
		}
		read := func(n string) string { b, _ := os.ReadFile(filepath.Join(d, n)); return string(b) }
		c := HookCall{
			Args:     strings.Split(strings.TrimSuffix(read("args"), "\n"), "\n"),
			Cwd:      strings.TrimSpace(read("cwd")),
			Env:      strings.Split(strings.TrimSuffix(read("env"), "\n"), "\n"),
			RawState: read("state"),
			Cgroup:   read("cgroup"),
			Comm:     strings.TrimSpace(read("comm")),
		}
		if len(c.Args) > 0 {
			c.Stage = c.Args[0]
		}
		if err := json.Unmarshal([]byte(c.RawState), &c.State); err != nil {
			t.Fatalf("hook call %s: state %q: %v", e.Name(), c.RawState, err)
		}
		info, err := os.Stat(filepath.Join(d, "args"))
		must(t, err)
		recs = append(recs, rec{c, info.ModTime().UnixNano()})
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].mod < recs[j].mod })
	out := make([]HookCall, len(recs))
	for i, r := range recs {
		out[i] = r.c
	}
	return out
}

// HooksD is an OCI hooks.d file (schema 1.0.0, what podman and CRI-O read
// from --hooks-dir): Hook runs at Stages for containers whose annotations
// match When (regexp key -> regexp value).
type HooksD struct {
	Version string     `json:"version"`
	Hook    specs.Hook `json:"hook"`
	When    struct {
		Always      *bool             `json:"always,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"when"`
	Stages []string `json:"stages"`
}

// WriteHooksD writes a hooks.d JSON file dir/name.json running h at stages
// for containers carrying an annotation key matching annotationRe (any
// value); an empty annotationRe means always.
func WriteHooksD(t testing.TB, dir, name string, h specs.Hook, annotationRe string, stages ...string) string {
	t.Helper()
	f := HooksD{Version: "1.0.0", Hook: h, Stages: stages}
	if annotationRe == "" {
		yes := true
		f.When.Always = &yes
	} else {
		f.When.Annotations = map[string]string{annotationRe: ".*"}
	}
	b, err := json.MarshalIndent(f, "", "\t")
	must(t, err)
	p := filepath.Join(dir, name+".json")
	must(t, os.WriteFile(p, b, 0o644))
	return p
}

// wrapperScript logs each invocation's argv (one line, space-joined),
// keeps a copy of the bundle's config.json at create (DIR/config.json, the
// last create's), and execs the real runtime with the argv unchanged.
const wrapperScript = `#!/bin/sh
echo "$*" >> %[1]q/argv.log
prev=
for a in "$@"; do
	[ "$prev" = --bundle ] && cp "$a/config.json" %[1]q/config.json
	prev=$a
done
exec %[2]q "$@"
`

// RuntimeRecorder is a runtime that records how an engine calls it and
// execs the real one: what an engine passes to --runtime, --runc-binary or
// --add-runtime, and the spec it hands over.
type RuntimeRecorder struct {
	Path string // the runtime to give the engine
	Dir  string
}

// NewRuntimeRecorder writes a RuntimeRecorder execing real.
func NewRuntimeRecorder(t testing.TB, real string) *RuntimeRecorder {
	t.Helper()
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	r := &RuntimeRecorder{Path: filepath.Join(dir, "runtime"), Dir: dir}
	must(t, os.WriteFile(r.Path, []byte(fmt.Sprintf(wrapperScript, dir, real)), 0o755))
	return r
}

// Argv are the logged invocations, one space-joined argv each.
func (r *RuntimeRecorder) Argv(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.Dir, "argv.log"))
	if os.IsNotExist(err) {
		return nil
	}
	must(t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// Spec is the config.json the last create was given, nil before any.
func (r *RuntimeRecorder) Spec(t testing.TB) *specs.Spec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.Dir, "config.json"))
	if os.IsNotExist(err) {
		return nil
	}
	must(t, err)
	var s specs.Spec
	must(t, json.Unmarshal(b, &s))
	return &s
}
