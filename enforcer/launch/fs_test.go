//go:build linux

package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// newFSFixture is a workdir with one file per kind of declared access, plus
// an undeclared directory next to it. Everything is owned by the agent.
func newFSFixture(t *testing.T) (wd, secret string) {
	wd, secret = agentDir(t), agentDir(t)
	writeAgentFile(t, filepath.Join(wd, "ro.txt"), "read-only\n")
	writeAgentFile(t, filepath.Join(wd, "rw", "file.txt"), "mutable\n")
	writeAgentFile(t, filepath.Join(wd, "out", "keep.txt"), "in out\n")
	writeAgentFile(t, filepath.Join(wd, "trash", "old.txt"), "delete me\n")
	writeAgentFile(t, filepath.Join(secret, "secret.txt"), "secret\n")
	return wd, secret
}

var fsIntents = []string{
	"CONSUMES FILE:${workdir}/**",
	"MUTATES FILE:${workdir}/rw/**",
	"PROVIDES FILE:${workdir}/out/**",
	// out/* and not out/**: out itself may not be renamed, so the agent
	// cannot replace it and its rule stays exact (settle.go).
	"RENAMES FILE:${workdir}/out/*",
	"DELETES FILE:${workdir}/trash/**",
	"PROVIDES PROC:/usr/bin/dash",
	"PROVIDES PROC:/usr/bin/cat",
	"PROVIDES PROC:/usr/bin/touch",
	"PROVIDES PROC:/usr/bin/rm",
	"PROVIDES PROC:/usr/bin/ln",
	"PROVIDES PROC:/usr/bin/mv",
	"PROVIDES PROC:/usr/bin/mkdir",
	"PROVIDES PROC:/usr/bin/true",
}

// TestFileOpsExactErrno performs each operation with a direct system call
// inside one session and asserts the exact outcome.
func TestFileOpsExactErrno(t *testing.T) {
	wd, secret := newFSFixture(t)
	rs := compile(t, wd, append(fsIntents, "PROVIDES PROC:"+probePath)...)
	j := func(p string) string { return filepath.Join(wd, p) }
	cases := []struct{ op, want string }{
		{"read:" + j("ro.txt"), "ok"},
		{"read:" + filepath.Join(secret, "secret.txt"), "EACCES"}, // undeclared
		{"read:/etc/hostname", "EACCES"},                          // undeclared, world-readable
		{"read:/proc/self/status", "ok"},                          // baseline
		{"append:" + j("rw/file.txt"), "ok"},                      // MUTATES
		{"append:" + j("ro.txt"), "EACCES"},                       // CONSUMES only
		{"trunc:" + j("ro.txt"), "EACCES"},
		{"create:" + j("out/new.txt"), "ok"}, // PROVIDES
		{"mkdir:" + j("out/sub"), "ok"},
		{"create:" + j("new.txt"), "EACCES"}, // outside PROVIDES
		{"mkdir:" + j("sub"), "EACCES"},
		{"create:" + j("rw/new.txt"), "EACCES"}, // MUTATES does not create
		{"create:/tmp/klock-launch-escape", "EACCES"},
		{"unlink:" + j("trash/old.txt"), "ok"}, // DELETES
		{"unlink:" + j("ro.txt"), "EACCES"},    // outside DELETES
		{"unlink:" + j("rw/file.txt"), "EACCES"},
		{"unlink:" + j("out/keep.txt"), "ok"}, // RENAMES carries REMOVE_FILE: a Widened residual (see TestPlanResiduals)
		{"rename:" + j("out/new.txt") + ">" + j("out/renamed.txt"), "ok"},
		{"rename:" + j("ro.txt") + ">" + j("out/ro.txt"), "EACCES"},   // no REMOVE_FILE on the source directory
		{"link:" + j("ro.txt") + ">" + j("out/ro-link.txt"), "EXDEV"}, // hard link into a writable scope
		{"link:" + j("ro.txt") + ">" + j("ro-link.txt"), "EACCES"},    // same directory, no MAKE_REG there
		{"append:" + j("out/ro-link.txt"), "ENOENT"},                  // so there is nothing to write through
		{"exec:/usr/bin/true", "ok"},                                  // declared PROC
		{"exec:/usr/bin/id", "EACCES"},                                // undeclared binary
	}
	var args []string
	for _, c := range cases {
		args = append(args, c.op)
	}
	r := run(t, Spec{Ruleset: rs, Path: probePath, Args: append([]string{"probe"}, args...),
		Env: []string{"KLOCK_LAUNCH_PROBE=fileops"}, NewNetNS: true})
	if r.exit != (Exit{}) {
		t.Fatalf("probe: %v\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
	}
	got := lines(r.stdout)
	for _, c := range cases {
		if got[c.op] != c.want {
			t.Errorf("%s: got %q, want %q", c.op, got[c.op], c.want)
		}
	}
	// The file system agrees.
	assertContent(t, j("ro.txt"), "read-only\n")
	assertContent(t, j("rw/file.txt"), "mutable\nappended\n")
	assertContent(t, j("out/renamed.txt"), "created\n")
	assertAbsent(t, j("trash/old.txt"), j("new.txt"), j("sub"), j("rw/new.txt"), j("out/ro-link.txt"), j("out/ro.txt"), "/tmp/klock-launch-escape")
}

func assertContent(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != want {
		t.Errorf("%s: got %q (%v), want %q", path, b, err, want)
	}
}

func assertAbsent(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists (%v); the agent must not have created it", p, err)
		}
	}
}

// TestShellCommands runs the real tools a coding agent uses and asserts
// each one's exit status and the resulting files.
func TestShellCommands(t *testing.T) {
	wd, secret := newFSFixture(t)
	rs := compile(t, wd, fsIntents...)
	script := strings.Join([]string{
		`cd ` + wd,
		`cat ro.txt >/dev/null; echo cat_ro=$?`,
		`cat ` + secret + `/secret.txt >/dev/null; echo cat_secret=$?`,
		`echo more >> rw/file.txt; echo append_rw=$?`,
		`(echo x >> ro.txt) 2>/dev/null; echo append_ro=$?`,
		`touch out/t; echo touch_out=$?`,
		`touch t; echo touch_wd=$?`,
		`rm trash/old.txt; echo rm_trash=$?`,
		`rm -f ro.txt; echo rm_ro=$?`,
		`ln ro.txt out/l; echo ln_into_out=$?`,
		`mv out/t out/t2; echo mv_in_out=$?`,
		`mv ro.txt out/; echo mv_ro_out=$?`,
		`mkdir out/d; echo mkdir_out=$?`,
		`/usr/bin/id; echo exec_id=$?`,
		`exit 7`,
	}, "\n")
	r := sh(t, rs, script)
	if r.exit != (Exit{Code: 7}) {
		t.Fatalf("exit: got %v, want exit status 7\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
	}
	want := map[string]string{
		"cat_ro": "0", "cat_secret": "1", "append_rw": "0", "append_ro": "2",
		"touch_out": "0", "touch_wd": "1", "rm_trash": "0", "rm_ro": "1",
		"ln_into_out": "1", "mv_in_out": "0", "mv_ro_out": "1", "mkdir_out": "0",
		"exec_id": "126",
	}
	got := lines(r.stdout)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: exit status %q, want %s", k, got[k], v)
		}
	}
	// cat, touch, rm, mv and the exec are EACCES; ln is Landlock's EXDEV.
	if n := strings.Count(r.stderr, "Permission denied"); n != 5 || !strings.Contains(r.stderr, "'out/l' => 'ro.txt': Invalid cross-device link") {
		t.Errorf("want 5 Permission denied and ln's cross-device refusal, got %d in:\n%s", n, r.stderr)
	}
	assertContent(t, filepath.Join(wd, "ro.txt"), "read-only\n")
	assertContent(t, filepath.Join(wd, "rw/file.txt"), "mutable\nmore\n")
	assertContent(t, filepath.Join(wd, "out/t2"), "")
	assertAbsent(t, filepath.Join(wd, "t"), filepath.Join(wd, "trash/old.txt"), filepath.Join(wd, "out/l"), filepath.Join(wd, "out/ro.txt"))
}

// TestRuleSurvivesReplacedDirectory: the wall alone (no observer) lets the
// agent do what it declared in directories it makes or replaces during the
// session: `make clean && make` made build/ anew and its program could not
// run (exit 126), and a RENAMES on a directory made during the session was
// refused.
func TestRuleSurvivesReplacedDirectory(t *testing.T) {
	wd := agentDir(t)
	writeAgentFile(t, filepath.Join(wd, "build", "old.o"), "old\n")
	rs := compile(t, wd, "CONSUMES FILE:${workdir}/**", "PROVIDES FILE:${workdir}/**",
		"DELETES FILE:${workdir}/build/**", "PROVIDES PROC:${workdir}/build/*",
		"RENAMES FILE:${workdir}/sub/**", "DELETES FILE:${workdir}/sub/**",
		"PROVIDES PROC:/usr/bin/dash", "PROVIDES PROC:/usr/bin/rm", "PROVIDES PROC:/usr/bin/mkdir", "PROVIDES PROC:/usr/bin/cp", "PROVIDES PROC:/usr/bin/mv")
	script := strings.Join([]string{
		`cd ` + wd,
		`rm -r build && mkdir build && cp /usr/bin/true build/hello; echo rebuild=$?`,
		`build/hello; echo run=$?`,
		`mkdir -p sub && echo x > sub/a.tmp && mv sub/a.tmp sub/a; echo mv_sub=$?`,
		`rm sub/a; echo rm_sub=$?`,
	}, "\n")
	r := sh(t, rs, script)
	got := lines(r.stdout)
	for _, k := range []string{"rebuild", "run", "mv_sub", "rm_sub"} {
		if got[k] != "0" {
			t.Errorf("%s: exit status %q, want 0\nstdout:\n%s\nstderr:\n%s", k, got[k], r.stdout, r.stderr)
		}
	}
}
