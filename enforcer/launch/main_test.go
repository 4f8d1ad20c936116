//go:build linux

package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// The agent identity in tests: nobody/nogroup. Every file the tests create
// for the agent is owned by it, so a denial can only come from Landlock.
const agentUID, agentGID = 65534, 65534

// probePath is a copy of this test binary in a directory the agent can
// traverse; run as the agent with KLOCK_LAUNCH_PROBE set, it performs
// system calls and prints their exact outcome (see probe_test.go).
var probePath string

func TestMain(m *testing.M) {
	Init()
	if mode, ok := os.LookupEnv("KLOCK_LAUNCH_PROBE"); ok {
		os.Exit(probe(mode, os.Args[1:]))
	}
	if workdir, ok := os.LookupEnv("KLOCK_LAUNCH_SIBLING"); ok {
		os.Exit(siblingMain(workdir))
	}
	var dir string
	if os.Geteuid() == 0 {
		var err error
		if dir, err = makeProbe(); err != nil {
			fmt.Fprintln(os.Stderr, "launch tests: copy probe:", err)
			os.Exit(2)
		}
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

func makeProbe() (string, error) {
	dir, err := os.MkdirTemp("", "klock-launch-probe-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return dir, err
	}
	probePath, err = testutil.CopySelf(dir, "probe")
	return dir, err
}

// manifestYAML is a valid manifest around intents; ${workdir} is workdir.
func manifestYAML(workdir string, intents []string) string {
	return testutil.ManifestYAML("launch-test", "", workdir, intents...)
}

func compile(t testing.TB, workdir string, intents ...string) *policy.Ruleset {
	t.Helper()
	m, err := policy.Parse("launch-test.yaml", []byte(manifestYAML(workdir, intents)))
	if err != nil {
		t.Fatalf("parse manifest: %v", err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	if rs, err = rs.FollowLinks(TrustedLinks(rs.Workdir)); err != nil { // as a session does
		t.Fatalf("follow links: %v", err)
	}
	return rs
}

// agentDir makes a temp directory the agent can traverse and own.
func agentDir(t testing.TB) string {
	t.Helper()
	testutil.RequirePrivileged(t)
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(d, agentUID, agentGID); err != nil {
		t.Fatal(err)
	}
	return d
}

// writeAgentFile creates path (and its directories) owned by the agent,
// mode 0644 (0755 dirs): DAC always allows the agent.
func writeAgentFile(t *testing.T, path, content string) {
	t.Helper()
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, path} {
		if err := os.Chown(p, agentUID, agentGID); err != nil {
			t.Fatal(err)
		}
	}
}

var groupSeq atomic.Int64

func newGroup(t testing.TB) *cgroup.Group {
	t.Helper()
	g, err := cgroup.Create(fmt.Sprintf("launch-test-%d-%d", os.Getpid(), groupSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Delete(); err != nil {
			t.Errorf("delete session cgroup: %v", err)
		}
	})
	return g
}

func agentUser() *Credential { return &Credential{UID: agentUID, GID: agentGID} }

// result is one finished session.
type result struct {
	exit           Exit
	stdout, stderr string
	proc           *Process
}

// run launches spec (filling in Group, User and output) and waits.
func run(t *testing.T, s Spec) result {
	t.Helper()
	testutil.RequirePrivileged(t)
	if s.Group == nil {
		s.Group = newGroup(t)
	}
	if s.User == nil {
		s.User = agentUser()
	}
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	p, err := Start(context.Background(), s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	exit, err := p.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return result{exit: exit, stdout: out.String(), stderr: errb.String(), proc: p}
}

// sh runs a shell script as the agent.
func sh(t *testing.T, rs *policy.Ruleset, script string) result {
	t.Helper()
	return run(t, Spec{Ruleset: rs, Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, NewNetNS: true})
}

// lines parses "key=value" output lines.
func lines(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}
