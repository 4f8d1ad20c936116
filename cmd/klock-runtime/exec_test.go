package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// prepare makes the state directory klock-runtime's create makes for id.
func (e *env) prepare(id string) {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Join(e.state, id), 0o711); err != nil {
		e.t.Fatal(err)
	}
	write(e.t, filepath.Join(e.state, id, "wall.json"), "{}", 0o644)
	if err := writeExecPolicy(filepath.Join(e.state, id), execPolicy{}); err != nil {
		e.t.Fatal(err)
	}
}

var prefix = []string{"/dev/.klock/klock-stage2", "--klock-wall=/dev/.klock/wall.json", "--"}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestExecPositional: runc exec [flags] ID CMD... into a container
// klock-runtime prepared: the flags stay as given (both forms, values that
// look like flags or ids), --no-new-privs goes before the id (replacing any
// no-new-privs flag given), and stage 2's prefix before the command.
func TestExecPositional(t *testing.T) {
	for _, c := range []struct{ given, want []string }{
		{[]string{"exec", "c1", "sh", "-c", "echo x"},
			cat([]string{"exec", "--no-new-privs", "c1"}, prefix, []string{"sh", "-c", "echo x"})},
		{[]string{"--root", "/r", "--log=/l", "exec", "-t", "--cwd", "/w", "-e", "A=c1", "--env=B=2", "-u", "0:0", "--console-socket", "/s", "c1", "ls", "--cwd", "x"},
			cat([]string{"--root", "/r", "--log=/l", "exec", "-t", "--cwd", "/w", "-e", "A=c1", "--env=B=2", "-u", "65534:65534", "--console-socket", "/s", "--no-new-privs", "c1"}, prefix, []string{"ls", "--cwd", "x"})},
		// root's ids become nobody's (as Rewrite's), gid 0 leaves the extra groups
		{[]string{"exec", "--user=0", "-g", "0", "--additional-gids=0x0", "-g=5", "-u", "1000:0", "--user", "00:7", "c1", "id"},
			cat([]string{"exec", "--user=65534", "-g=5", "-u", "1000:65534", "--user", "65534:7", "--no-new-privs", "c1"}, prefix, []string{"id"})},
		{[]string{"exec", "--detach", "--pid-file=/p", "--preserve-fds", "2", "--cgroup", "cpu:sub", "--process-label", "l", "--apparmor", "a", "-g", "10", "--additional-gids=11", "--ignore-paused", "-d", "c1", "true"},
			cat([]string{"exec", "--detach", "--pid-file=/p", "--preserve-fds", "2", "--cgroup", "cpu:sub", "--process-label", "l", "--apparmor", "a", "-g", "10", "--additional-gids=11", "--ignore-paused", "-d", "--no-new-privs", "c1"}, prefix, []string{"true"})},
		{[]string{"exec", "--no-new-privs=false", "--tty=false", "--", "c1", "--", "x"},
			cat([]string{"exec", "--tty=false", "--no-new-privs", "--", "c1"}, prefix, []string{"--", "x"})},
		{[]string{"exec", "--no-new-privs", "c1", "/dev/.klock/klock-stage2", "--klock-wall=/dev/.klock/wall.json", "--", "id"},
			cat([]string{"exec", "--no-new-privs", "c1"}, prefix, []string{"id"})}, // not twice
	} {
		e := newEnv(t, "")
		e.prepare("c1")
		e.prepare("other")
		code, stderr := e.run(append([]string{"--runtime-path=" + e.runtime}, c.given...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", c.given, code, stderr)
		}
		if got := e.argv(); !reflect.DeepEqual(got, c.want) {
			t.Fatalf("%q:\nruntime got %q\nwant        %q", c.given, got, c.want)
		}
	}
}

// processJSON is a Process as an engine writes it, with a field this
// runtime-spec version may not know.
const processJSON = `{"terminal":false,"user":{"uid":0,"gid":0,"additionalGids":[1]},"args":["sh","-c","echo x > /workspace/keep.txt"],` +
	`"env":["PATH=/bin"],"cwd":"/workspace","capabilities":{"bounding":["CAP_KILL","CAP_SYS_ADMIN"],"effective":["CAP_KILL"],"permitted":["CAP_KILL"]},` +
	`"noNewPrivileges":false,"apparmorProfile":"p","futureField":{"a":[1,2]}}`

// TestExecProcessFile: exec --process FILE (podman, containerd, Docker):
// argv passes through as given; FILE is rewritten in place: stage 2
// before its args, noNewPrivileges, no capabilities, every other field as
// it was; a second exec with the same file does not prefix twice.
func TestExecProcessFile(t *testing.T) {
	for _, form := range [][]string{{"--process", "P"}, {"-p", "P"}, {"--process=P"}, {"-p=P"}} {
		e := newEnv(t, "")
		e.prepare("c1")
		pf := filepath.Join(e.dir, "process.json")
		write(t, pf, processJSON, 0o600)
		var flags []string
		for _, f := range form {
			flags = append(flags, strings.ReplaceAll(f, "P", pf))
		}
		given := cat([]string{"--root", "/r", "exec", "--detach", "--pid-file", "/p"}, flags, []string{"c1"})
		for round := 0; round < 2; round++ {
			code, stderr := e.run(append([]string{"--runtime-path=" + e.runtime}, given...)...)
			if code != 0 {
				t.Fatalf("%q: exit %d: %s", given, code, stderr)
			}
			if got := e.argv(); !reflect.DeepEqual(got, given) {
				t.Fatalf("runtime got %q, want %q", got, given)
			}
			data, _ := os.ReadFile(pf)
			var got, want map[string]any
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			json.Unmarshal([]byte(processJSON), &want)
			want["args"] = []any{prefix[0], prefix[1], prefix[2], "sh", "-c", "echo x > /workspace/keep.txt"}
			want["noNewPrivileges"] = true
			want["user"] = map[string]any{"uid": float64(65534), "gid": float64(65534), "additionalGids": []any{float64(1)}}
			want["capabilities"] = map[string]any{"bounding": []any{}, "effective": []any{}, "inheritable": []any{}, "permitted": []any{}, "ambient": []any{}}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: process.json:\n%s\nwant %v", round, data, want)
			}
			if st, _ := os.Stat(pf); st.Mode().Perm() != 0o600 {
				t.Fatalf("process.json mode %v, want 0600 kept", st.Mode())
			}
		}
		if left, _ := filepath.Glob(filepath.Join(e.dir, ".process.json.klock-*")); len(left) != 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	}
}

// TestExecUntouched: exec into a container klock-runtime did not prepare
// (no state directory: another container's does not count), exec --help,
// and an exec it cannot read on a host where it prepared no container,
// pass through: argv as given, the process file not even rewritten.
func TestExecUntouched(t *testing.T) {
	for _, c := range []struct {
		given    []string
		prepared []string
	}{
		{[]string{"exec", "c1", "sh", "-c", "echo x"}, []string{"other"}},
		{[]string{"exec", "-t", "--user", "0", "--", "c1", "id"}, []string{"c1x", "c"}},
		{[]string{"exec", "--process", "PF", "c1"}, []string{"other"}},
		{[]string{"exec", "-p=PF", "--detach", "c1"}, nil},
		{[]string{"exec", "--help"}, []string{"c1"}},
		{[]string{"exec", "-h", "c1", "id"}, []string{"c1"}},
		{[]string{"exec"}, []string{"c1"}},
		{[]string{"exec", "--cap", "CAP_SYS_ADMIN", "c1", "id"}, []string{"other"}},
		{[]string{"exec", "--unknown", "c1", "id"}, nil},        // no container of klock's here
		{[]string{"exec", "--cwd"}, nil},                        // runc's error to give
		{[]string{"exec", "../c1", "id"}, []string{"c1"}},       // not an id klock-runtime takes
		{[]string{"exec", "--process", "PF", "c1"}, []string{}}, // state root exists, empty
	} {
		e := newEnv(t, "")
		if c.prepared != nil {
			os.MkdirAll(e.state, 0o700)
		}
		for _, id := range c.prepared {
			e.prepare(id)
		}
		pf := filepath.Join(e.dir, "process.json")
		write(t, pf, processJSON, 0o644)
		var before syscall.Stat_t
		syscall.Stat(pf, &before)
		var given []string
		for _, a := range c.given {
			given = append(given, strings.ReplaceAll(a, "PF", pf))
		}
		code, stderr := e.run(append([]string{"--runtime-path=" + e.runtime}, given...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", given, code, stderr)
		}
		want := given
		if got := e.argv(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: runtime got %q", given, got)
		}
		var after syscall.Stat_t
		syscall.Stat(pf, &after)
		if data, _ := os.ReadFile(pf); string(data) != processJSON || after.Ino != before.Ino {
			t.Fatalf("%q: process.json touched: %s", given, data)
		}
	}
}

// TestExecRefuses: with a container of klock's on the host, an exec whose
// container id klock-runtime cannot tell for sure (a flag runc 1.1's exec
// does not have, a value flag with no value) is refused, and so is --cap
// or an unusable process file for a prepared container; the runtime does
// not run.
func TestExecRefuses(t *testing.T) {
	for _, c := range []struct {
		given []string
		want  string
	}{
		{[]string{"exec", "--unknown", "c1", "id"}, "--unknown is not one of runc 1.1's exec flags"},
		{[]string{"exec", "-td", "c1", "id"}, "-td is not one of"},
		{[]string{"exec", "--tty", "--pid-file"}, "--pid-file needs a value"},
		{[]string{"exec", "--cap", "CAP_SYS_ADMIN", "c1", "id"}, "--cap CAP_SYS_ADMIN"},
		{[]string{"exec", "-c=CAP_KILL", "-p", "PF", "c1"}, "--cap CAP_KILL"},
		{[]string{"exec", "-p", "NOPE", "c1"}, "read the process"},
		{[]string{"exec", "-p", "EMPTY", "c1"}, "args is empty"},
	} {
		e := newEnv(t, "")
		e.prepare("c1")
		pf := filepath.Join(e.dir, "process.json")
		write(t, pf, processJSON, 0o644)
		empty := filepath.Join(e.dir, "empty.json")
		write(t, empty, `{"args":[],"cwd":"/"}`, 0o644)
		var given []string
		for _, a := range c.given {
			a = strings.ReplaceAll(a, "PF", pf)
			a = strings.ReplaceAll(a, "NOPE", filepath.Join(e.dir, "missing.json"))
			given = append(given, strings.ReplaceAll(a, "EMPTY", empty))
		}
		code, stderr := e.run(append([]string{"--runtime-path=" + e.runtime}, given...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Fatalf("%q: exit %d, stderr %q; want a refusal saying %q", given, code, stderr, c.want)
		}
		if got := e.argv(); got != nil {
			t.Fatalf("%q: the runtime ran with %q", given, got)
		}
		if data, _ := os.ReadFile(pf); string(data) != processJSON {
			t.Fatalf("%q: process.json changed on a refusal: %s", given, data)
		}
	}
}

// TestExecProcessUser: an engine's Process as root (uid 0, no user at all,
// gid 0 among the extra groups) runs as nobody, unless create recorded
// that the container may run as root (allow-root).
func TestExecProcessUser(t *testing.T) {
	for _, c := range []struct {
		allowRoot  bool
		user, want string
	}{
		{false, `"user":{"uid":0,"gid":0,"additionalGids":[0,4],"umask":18},`, `{"additionalGids":[4],"gid":65534,"uid":65534,"umask":18}`},
		{false, ``, `{"gid":65534,"uid":65534}`},
		{false, `"user":{"uid":1000,"gid":0},`, `{"gid":65534,"uid":1000}`},
		{true, `"user":{"uid":0,"gid":0,"additionalGids":[0]},`, `{"uid":0,"gid":0,"additionalGids":[0]}`},
	} {
		e := newEnv(t, "")
		e.prepare("c1")
		if err := writeExecPolicy(filepath.Join(e.state, "c1"), execPolicy{AllowRoot: c.allowRoot}); err != nil {
			t.Fatal(err)
		}
		pf := filepath.Join(e.dir, "process.json")
		write(t, pf, `{`+c.user+`"args":["id"],"cwd":"/"}`, 0o644)
		if code, stderr := e.run("--runtime-path="+e.runtime, "exec", "-p", pf, "c1"); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		data, _ := os.ReadFile(pf)
		var got map[string]json.RawMessage
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		if string(got["user"]) != c.want {
			t.Fatalf("user %s (allow root %v): got %s, want %s", c.user, c.allowRoot, got["user"], c.want)
		}
	}
}
