package tools

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/internal/testutil"
)

// A REVERSIBLE-WRITE's declared rollback runs when the
// run's session is killed: `klock tools rollback --run` reaches the running
// gateway over its control socket, the compensation (a real plugin) undoes
// the effect, and it is audited and receipted. The compensation is
// journaled, so a gateway restarted between the call and the kill still
// runs it.
func TestKilledRunIsRolledBackAfterAGatewayRestart(t *testing.T) {
	testutil.RequirePrivileged(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	notes := filepath.Join(base, "notes")
	os.MkdirAll(notes, 0o777)
	os.Chmod(notes, 0o1777)
	plugins := filepath.Join(base, "plugins")
	fsPerm := fmt.Sprintf(`{"network":false,"filesystem":{"read":[%q],"write":[%q]}}`, notes+"/**", notes+"/**")
	plugin(t, plugins, "add_note", fsPerm, fmt.Sprintf(`read -r line
echo "$line" > %s/n1
printf '{"output":{"note_id":"n1"}}\n'
`, notes))
	// delete_note marks the note its argument names deleted (a shell
	// builtin writes the mark: a plugin starts no program).
	plugin(t, plugins, "delete_note", fsPerm, fmt.Sprintf(`read -r line
case "$line" in
*'"note_id":"n1"'*) echo "$line" > %s/n1.deleted; printf '{"output":{"deleted":true}}\n' ;;
*) printf '{"error":"which note?"}\n' ;;
esac
`, notes))
	decl := `  - {name: add_note, type: write, blast_radius: local, category: B, side_effects: REVERSIBLE-WRITE, timeout_ms: 30000,
     idempotency: {mode: natural}, rollback: {mechanism: delete_note(note_id), window: session, restores: no note},
     autonomy: {unsupervised: always}}
  - {name: delete_note, type: write, blast_radius: local, category: B, side_effects: REVERSIBLE-WRITE, timeout_ms: 30000,
     idempotency: {mode: natural}, rollback: {mechanism: re-add the note by hand, window: session, restores: the note},
     autonomy: {unsupervised: always}}
`
	receipts := filepath.Join(base, "receipts")
	sock := filepath.Join(base, "state", "control.sock")
	url, stop := serve(t, base, plugins, decl, "--run-id", "run_kill_1", "--receipts", receipts)
	if r := post(t, url, `{"tool":"add_note","args":{"text":"hi"}}`); !r.OK {
		t.Fatalf("add_note: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(notes, "n1")); err != nil {
		t.Fatalf("the note was not written: %v", err)
	}
	// The gateway restarts between the call and the kill.
	stop()
	_, stop2 := serve(t, base, plugins, decl, "--run-id", "run_after_restart", "--receipts", receipts)
	out, err := exec.Command(klockBin, "tools", "rollback", "--socket", sock, "--run", "run_kill_1", "--reason", "session s1 killed").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "via delete_note: undone") {
		t.Fatalf("klock tools rollback: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(notes, "n1.deleted")); err != nil {
		t.Fatalf("the compensation did not run: %v", err)
	}
	// Once: a second request has nothing left to undo.
	out, err = exec.Command(klockBin, "tools", "rollback", "--socket", sock, "--run", "run_kill_1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nothing to undo") {
		t.Fatalf("second rollback: %v\n%s", err, out)
	}
	stop2()
	// Audited, and receipted in the signed chain.
	if out, err := exec.Command(klockBin, "receipts", "verify", receipts).CombinedOutput(); err != nil {
		t.Fatalf("klock receipts verify: %v\n%s", err, out)
	}
	var rolled []*receipt.Receipt
	receipt.VerifyFile(filepath.Join(receipts, "receipts.jsonl"), nil, func(r *receipt.Receipt) error {
		if r.Phase == receipt.PhaseRollback {
			rolled = append(rolled, r)
		}
		return nil
	})
	if len(rolled) != 1 || rolled[0].ToolName != "delete_note" || rolled[0].Decision.Verdict != receipt.Allow || rolled[0].PolicyHash == "" {
		t.Fatalf("rollback receipts: %+v", rolled)
	}
	audit, _ := os.ReadFile(filepath.Join(base, "state", "gateway", agentID(t, base), "audit.jsonl"))
	if !strings.Contains(string(audit), `"event":"rollback"`) {
		t.Fatalf("no rollback audit record:\n%s", audit)
	}
}

// agentID reads the agent id serve wrote into base/agent.yaml.
func agentID(t *testing.T, base string) string {
	data, _ := os.ReadFile(filepath.Join(base, "agent.yaml"))
	_, rest, _ := strings.Cut(string(data), "agent: {id: ")
	id, _, _ := strings.Cut(rest, ",")
	return id
}

// A strict klock run session bound to the
// gateway (--gateway, --gateway-run) that is killed for a violation makes
// the gateway run its calls' declared rollbacks.
func TestStrictKillReachesTheGateway(t *testing.T) {
	testutil.RequirePrivileged(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	notes := filepath.Join(base, "notes")
	os.MkdirAll(notes, 0o777)
	os.Chmod(notes, 0o1777)
	plugins := filepath.Join(base, "plugins")
	fsPerm := fmt.Sprintf(`{"network":false,"filesystem":{"read":[%q],"write":[%q]}}`, notes+"/**", notes+"/**")
	plugin(t, plugins, "add_note", fsPerm, "read -r line\nprintf '{\"output\":{\"note_id\":\"n1\"}}\\n'\n")
	plugin(t, plugins, "delete_note", fsPerm, fmt.Sprintf("read -r line\necho \"$line\" > %s/n1.deleted\nprintf '{\"output\":{\"deleted\":true}}\\n'\n", notes))
	decl := `  - {name: add_note, type: write, blast_radius: local, category: B, side_effects: REVERSIBLE-WRITE, timeout_ms: 30000,
     idempotency: {mode: natural}, rollback: {mechanism: delete_note(note_id), window: session, restores: no note},
     autonomy: {unsupervised: always}}
  - {name: delete_note, type: write, blast_radius: local, category: B, side_effects: REVERSIBLE-WRITE, timeout_ms: 30000,
     idempotency: {mode: natural}, rollback: {mechanism: re-add the note by hand, window: session, restores: the note},
     autonomy: {unsupervised: always}}
`
	url, _ := serve(t, base, plugins, decl, "--run-id", "run_agent_7", "--receipts", filepath.Join(base, "receipts"))
	if r := post(t, url, `{"tool":"add_note","args":{"text":"hi"}}`); !r.OK {
		t.Fatalf("add_note: %+v", r)
	}
	// The agent's session: it may run touch in its workdir, and touches
	// outside it.
	work := filepath.Join(base, "work")
	os.MkdirAll(work, 0o755)
	touch, _ := filepath.EvalSymlinks("/usr/bin/touch")
	runManifest := filepath.Join(base, "run.yaml")
	write(t, runManifest, fmt.Sprintf(`apiVersion: klock/v1
agent: {id: killed-agent, version: 1.0.0}
mode: strict
workdir: %s
intents:
  - PROVIDES PROC:%s
  - MUTATES FILE:%s/**
  - PROVIDES FILE:%s/**
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`, work, touch, work, work), 0o644)
	outside := filepath.Join(base, "outside-file")
	cmd := exec.Command(klockBin, "run", "-m", runManifest, "--user", "0", "--no-daemon", "-q",
		"--gateway", filepath.Join(base, "state", "control.sock"), "--gateway-run", "run_agent_7", "--", touch, outside)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 113 {
		t.Fatalf("klock run: %v (want the strict kill, 113)\n%s", err, out)
	}
	if !strings.Contains(string(out), "via delete_note: undone") {
		t.Fatalf("the kill did not reach the gateway:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(notes, "n1.deleted")); err != nil {
		t.Fatalf("the compensation did not run: %v", err)
	}
}
