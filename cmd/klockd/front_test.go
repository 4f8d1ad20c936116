package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/runout"
	"github.com/klocklabs/klock/internal/testutil"
)

// runFront runs bin with args against sock and returns its exit status and
// standard error.
func runFront(t *testing.T, bin, sock string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KLOCK_SOCKET="+sock)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", bin, err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestFrontServesRunsLikeTheCLI: the klock front, alone in its directory
// (no klock-cli beside it to hand over to), serves klock run through a
// real klockd with the full CLI's exit statuses and output; what it does
// not serve (a flag of the full CLI's, no klockd) it hands over, which
// here fails naming klock-cli.
func TestFrontServesRunsLikeTheCLI(t *testing.T) {
	testutil.RequirePrivileged(t)
	bins := testutil.OpenDir(t, -1)
	klockd := testutil.BuildCommand(t, bins, "klockd")
	testutil.BuildCommand(t, bins, "klock-stage2")
	cli := filepath.Join(filepath.Dir(testutil.BuildCommand(t, bins, "klock")), "klock-cli")
	alone := testutil.OpenDir(t, -1)
	front := filepath.Join(alone, "klock")
	if out, err := exec.Command("cp", filepath.Join(bins, "klock"), front).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	dir := testutil.OpenDir(t, -1)
	sock := filepath.Join(dir, "klockd.sock")
	defer startKlockdArgs(t, klockd, sock, "--api-socket", filepath.Join(dir, "api.sock"))()

	wd := agentDir(t)
	manifest := filepath.Join(dir, "m.yaml")
	yaml := testutil.ManifestYAML("front-test", "strict", wd, "MUTATES FILE:${workdir}/**", "PROVIDES PROC:/usr/bin/**", "PROVIDES PROC:/bin/**")
	if err := os.WriteFile(manifest, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(wd, "kept")
	if err := os.WriteFile(kept, []byte("before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(kept, metricsAgentUID, metricsAgentUID); err != nil {
		t.Fatal(err)
	}
	violate := []string{"run", "-m", manifest, "--", "sh", "-c", "echo after > " + wd + "/kept; echo x > " + wd + "/new; sleep 5"}
	for _, bin := range []string{front, cli} {
		code, stderr := runFront(t, bin, sock, violate...)
		if code != runout.ExitViolation || !strings.Contains(stderr, "VIOLATION (blocked, killed, 1 file restored)") || !strings.Contains(stderr, "verification log: ") ||
			!strings.Contains(stderr, "klock: ScopeViolationError: Agent attempted PROVIDES on "+wd+"/new") {
			t.Errorf("%s run with a violation: exit %d, stderr:\n%s", bin, code, stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(wd, "kept")); string(b) != "before\n" {
			t.Errorf("%s: kept holds %q after the rollback", bin, b)
		}
	}
	code, stderr := runFront(t, front, sock, "run", "-q", "-m", manifest, "--", "sh", "-c", "exit 7")
	if code != 7 || stderr != "" {
		t.Errorf("front, agent exits 7 with -q: exit %d, stderr %q", code, stderr)
	}
	code, stderr = runFront(t, front, sock, "run", "-q", "--mode", "permissive", "-m", manifest, "--", "sh", "-c", "echo ok > "+wd+"/kept")
	if code != 0 || !strings.Contains(stderr, runout.PermissiveNotice) {
		t.Errorf("front, permissive: exit %d, stderr %q", code, stderr)
	}
	for _, c := range []struct {
		name, sock string
		args       []string
	}{
		{"a flag of the full CLI's", sock, []string{"run", "--no-daemon", "-m", manifest, "--", "true"}},
		{"no klockd", filepath.Join(dir, "none.sock"), []string{"run", "-m", manifest, "--", "true"}},
		{"another command", sock, []string{"ps"}},
	} {
		code, stderr := runFront(t, front, c.sock, c.args...)
		if code != 127 || !strings.Contains(stderr, "klock-cli") {
			t.Errorf("front, %s: exit %d (want 127: handed to the missing klock-cli), stderr %q", c.name, code, stderr)
		}
	}
}
