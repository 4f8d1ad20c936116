package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/guard/approval"
)

// run executes the CLI in-process and returns stdout and the exit status
// main would use.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, code, _ := execute(args...)
	return out, code
}

// execute runs the CLI in-process: its output, exit status and the error
// main would print.
func execute(args ...string) (string, int, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	code := exitOK
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code, err = ee.code, ee.err
	case err != nil:
		code = exitUsage
	}
	return out.String(), code, err
}

const ex = "../../examples/manifests/"

func TestValidateExitCodes(t *testing.T) {
	valid, _ := filepath.Glob(ex + "*.yaml")
	out, code := run(t, append([]string{"validate"}, valid...)...)
	if code != exitOK || strings.Count(out, "ok  ") != len(valid) {
		t.Fatalf("valid examples: code %d\n%s", code, out)
	}
	invalid, _ := filepath.Glob(ex + "invalid/*.yaml")
	for _, f := range invalid {
		if _, code := run(t, "validate", "-q", f); code != exitInvalid {
			t.Errorf("%s: exit %d, want %d", f, code, exitInvalid)
		}
	}
	if _, code := run(t, "validate"); code != exitUsage {
		t.Errorf("no args: exit %d, want usage", code)
	}
	if _, code := run(t, "validate", ex+"does-not-exist.yaml"); code != exitInvalid {
		t.Errorf("missing file: exit %d", code)
	}
}

func TestValidateJSON(t *testing.T) {
	out, code := run(t, "validate", "--json", ex+"invalid/unknown-field.yaml")
	if code != exitInvalid || !strings.Contains(out, `"code": "unknown-field"`) || !strings.Contains(out, `"line": 10`) {
		t.Fatalf("code %d\n%s", code, out)
	}
}

func TestExplainRefundMatrix(t *testing.T) {
	out, code := run(t, "explain", ex+"refund-agent.yaml")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	for _, row := range []string{"get_account", "get_transactions", "draft_email", "send_email", "issue_refund", "change_plan", "delete_account"} {
		if !strings.Contains(out, "\n"+row+" ") {
			t.Errorf("matrix lacks row %s", row)
		}
	}
	if !strings.Contains(out, "REVERSIBLE-WRITE (24h)") || !strings.Contains(out, "void_refund") || !strings.Contains(out, "else yes") {
		t.Errorf("issue_refund row incomplete:\n%s", out)
	}
	js, code := run(t, "explain", "--json", ex+"trifecta-agent.yaml")
	if code != exitOK || !strings.Contains(js, `"present": true`) || !strings.Contains(js, `"hitl_mode": "HITL"`) {
		t.Fatalf("trifecta JSON: %d\n%s", code, js)
	}
}

func TestSchemaIsJSON(t *testing.T) {
	out, code := run(t, "schema")
	if code != exitOK || !strings.Contains(out, `"declared_tools"`) || !strings.Contains(out, `"REVERSIBLE-WRITE"`) {
		t.Fatalf("schema: %d %.300s", code, out)
	}
}

func TestKeygenSignVerify(t *testing.T) {
	dir := t.TempDir()
	if _, code := run(t, "keygen", "-o", filepath.Join(dir, "k")); code != exitOK {
		t.Fatal("keygen failed")
	}
	if st, err := os.Stat(filepath.Join(dir, "k.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode: %v %v", st.Mode(), err)
	}
	if _, code := run(t, "keygen", "-o", filepath.Join(dir, "k")); code != exitUsage {
		t.Fatal("keygen overwrote an existing key without --force")
	}
	m := filepath.Join(dir, "agent.yaml")
	data, _ := os.ReadFile(ex + "coding-agent.yaml")
	os.WriteFile(m, data, 0o640)
	if out, code := run(t, "verify", "-k", filepath.Join(dir, "k.pub"), m); code != exitInvalid {
		t.Fatalf("unsigned verified: %s", out)
	}
	if out, code := run(t, "sign", "-k", filepath.Join(dir, "k.key"), m); code != exitOK {
		t.Fatalf("sign: %s", out)
	}
	if st, _ := os.Stat(m); st.Mode().Perm() != 0o640 {
		t.Errorf("sign changed the file mode to %v", st.Mode())
	}
	if out, code := run(t, "verify", "-k", filepath.Join(dir, "k.pub"), m); code != exitOK || !strings.Contains(out, "verified") {
		t.Fatalf("verify: %d %s", code, out)
	}
	signed, _ := os.ReadFile(m)
	os.WriteFile(m, bytes.Replace(signed, []byte("MUTATES FILE:${workdir}/src/**"), []byte("MUTATES FILE:${workdir}/**"), 1), 0o640)
	if out, code := run(t, "verify", "-k", filepath.Join(dir, "k.pub"), m); code != exitInvalid || !strings.Contains(out, "") {
		t.Fatalf("widened scope still verifies: %d %s", code, out)
	}
	if _, code := run(t, "sign", "-k", filepath.Join(dir, "k.key"), ex+"invalid/wildcard-tool.yaml"); code != exitInvalid {
		t.Fatal("signed an invalid manifest")
	}
}

func TestVersion(t *testing.T) {
	out, code := run(t, "version")
	if code != exitOK || !strings.HasPrefix(out, "klock ") {
		t.Fatalf("%d %q", code, out)
	}
}

// TestRunObserveNeedsPermissive: --backend observe puts no file wall up, so
// a strict run refuses it before anything starts (a usage error).
func TestRunObserveNeedsPermissive(t *testing.T) {
	root := newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"run", "-m", ex + "coding-agent.yaml", "--backend", "observe", "--", "/bin/true"})
	var ee *exitError
	if err := root.Execute(); !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), "--backend observe needs permissive mode") {
		t.Fatalf("strict run with --backend observe: %v, want a usage error that says permissive mode is needed", err)
	}
	if _, code := run(t, "run", "-m", ex+"coding-agent.yaml", "--backend", "nowall", "--", "/bin/true"); code != exitUsage {
		t.Fatalf("unknown backend: exit %d, want %d", code, exitUsage)
	}
}

// TestApprovalsShowArgsPrintable: an agent chooses its tool call's
// arguments; a bidi override or a C1 control sequence in them must not
// reorder or redraw what the approver reads before saying yes.
func TestApprovalsShowArgsPrintable(t *testing.T) {
	dir := t.TempDir()
	s, closeQ, err := approvalQueue(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer closeQ()
	args := []byte("{\"path\":\"/srv/data/report\u202efdp.exe\",\"note\":\"\u009b2J ok\"}")
	if _, err := s.Submit(approval.Request{Agent: "a1", Tool: "write_file", Args: args, ArgsSHA256: strings.Repeat("0", 64), Why: "irreversible"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "approvals", "--state-dir", dir)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if strings.ContainsAny(out, "\u202e\u009b") || !strings.Contains(out, `\u202e`) {
		t.Fatalf("approvals shows the raw controls:\n%q", out)
	}
}

// TestRunExit: a session ended from outside (Ctrl-C, klock kill) is not
// reported as a violation to the automation that runs klock.
func TestRunExit(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  session.Result
		code int
	}{
		{"agent's own status", session.Result{Exit: launch.Exit{Code: 7}}, 7},
		{"strict kill", session.Result{Killed: true, Reason: "lost events", Exit: launch.Exit{Signal: syscall.SIGKILL}}, exitViolation},
		{"interrupted", session.Result{Killed: true, Interrupted: true, Reason: "ended from outside: killed by klock kill", Exit: launch.Exit{Signal: syscall.SIGKILL}}, exitInterrupted},
		// A declared operation klock's wall refused: never the agent's 0.
		{"refused", session.Result{Exit: launch.Exit{Code: 0}, Log: &vlog.Log{Refused: []vlog.Refused{{Triple: "DELETES FILE:/w/.git/HEAD.lock", AllowedBy: "DELETES FILE:/w/.git/**"}}}}, exitWallRefused},
	} {
		if got := runExit(&tc.res); got.code != tc.code {
			t.Errorf("%s: exit %d, want %d", tc.name, got.code, tc.code)
		}
	}
}

func TestAgentEnv(t *testing.T) {
	t.Setenv("KLOCK_TEST_PASSED", "from klock")
	t.Setenv("TERM", "xterm")
	got := agentEnv([]string{"HOME=/srv/repo/.home", "KLOCK_TEST_PASSED", "KLOCK_TEST_UNSET", "PATH=/opt/bin"})
	want := []string{"LANG=C.UTF-8", "TERM=xterm", "HOME=/srv/repo/.home", "KLOCK_TEST_PASSED=from klock", "PATH=/opt/bin"}
	if !slices.Equal(got, want) {
		t.Errorf("agentEnv = %q, want %q", got, want)
	}
}
