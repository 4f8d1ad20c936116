package mcp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/receipt"
)

// TestBudgetChargesFilesystemCalls: the manifest's grants are charged by
// klock mcp. read_text_file may be called twice (max_invocations);
// write_file reserves 0.05 USD a call against a 0.10 USD total, and the
// server reports no cost, so each reservation stands (source unavailable).
// The third call of each is refused before it reaches the server, and the
// receipts (allowed and denied) verify offline with klock receipts verify.
func TestBudgetChargesFilesystemCalls(t *testing.T) {
	server := npmBin(t, "mcp-server-filesystem")
	root, _ := filepath.EvalSymlinks(t.TempDir())
	state := t.TempDir()
	writeFile(t, filepath.Join(root, "data", "hello.txt"), "hello\n")
	manifest := fsManifest(t, root, false)
	f, err := os.OpenFile(manifest, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`grants:
  - {tool: read_text_file, server_id: filesystem, operations: [invoke], max_invocations: 2}
  - {tool: write_file, server_id: filesystem, max_cost_per_invocation: "0.05 USD", max_total_cost: "0.10 USD"}
`)
	f.Close()
	if out, err := exec.Command(klockBin, "validate", manifest).CombinedOutput(); err != nil {
		t.Fatalf("manifest with grants: %s", out)
	}
	s := connect(t, "-m", manifest, "--state-dir", state, "--", "node", server, root)

	read := map[string]any{"path": filepath.Join(root, "data", "hello.txt")}
	for i := 0; i < 2; i++ {
		if r := call(t, s, "read_text_file", read); r.IsError {
			t.Fatalf("read %d: %s", i+1, text(r))
		}
	}
	e := refusal(t, call(t, s, "read_text_file", read))
	if e.Class != "tool_restricted" || e.Reason != "budget" || !strings.Contains(e.Message, "max_invocations") {
		t.Fatalf("third read: %+v", e)
	}
	// Refused by its input_schema before the budget saw it: a deny receipt
	// of its own, the schema's verdict last.
	if e := refusal(t, call(t, s, "read_text_file", map[string]any{"path": "/etc/passwd"})); e.Class != "tool_invalid_args" {
		t.Fatalf("read outside data/: %+v", e)
	}
	for i := 0; i < 2; i++ {
		p := filepath.Join(root, "data", "w"+string(rune('1'+i))+".txt")
		if r := call(t, s, "write_file", map[string]any{"path": p, "content": "x"}); r.IsError {
			t.Fatalf("write %d: %s", i+1, text(r))
		}
	}
	third := filepath.Join(root, "data", "w3.txt")
	e = refusal(t, call(t, s, "write_file", map[string]any{"path": third, "content": "x"}))
	if e.Class != "tool_restricted" || e.Reason != "budget" || !strings.Contains(e.Message, "max_total_cost") {
		t.Fatalf("third write: %+v", e)
	}
	if _, err := os.Stat(third); !os.IsNotExist(err) {
		t.Fatalf("the refused write reached the disk: %v", err)
	}
	s.Close() // klock mcp flushes the receipts as it exits

	dir := filepath.Join(root, ".klock", "receipts")
	out, err := exec.Command(klockBin, "receipts", "verify", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("klock receipts verify: %v\n%s", err, out)
	}
	t.Logf("klock receipts verify: %s", strings.TrimSpace(string(out)))
	count := map[string]int{}
	_, err = receipt.VerifyFile(filepath.Join(dir, "receipts.jsonl"), nil, func(r *receipt.Receipt) error {
		k := r.ToolName + " " + r.Phase + " " + r.Decision.Verdict
		if r.Phase == receipt.PhaseReconcile {
			k += " " + r.Metadata.Cost.Actual.Source
		}
		count[k]++
		// Each guard that decided is in the receipt, in order.
		var ev []string
		for _, e := range r.Evidence {
			ev = append(ev, fmt.Sprintf("%s%s", e.GuardName, map[bool]string{true: "+", false: "-"}[e.Verdict]))
		}
		count[k+" ["+strings.Join(ev, " ")+"]"]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"read_text_file pre-charge allow": 2, "read_text_file pre-charge deny": 1, "read_text_file reconcile allow unavailable": 2,
		"write_file pre-charge allow": 2, "write_file pre-charge deny": 1, "write_file reconcile allow unavailable": 2,
		"read_text_file guard deny":                                                                          1,
		"read_text_file guard deny [declared+ schema-]":                                                      1,
		"read_text_file pre-charge allow [declared+ schema+ rate+ autonomy+ lease+ budget+]":                 2,
		"read_text_file pre-charge deny [declared+ schema+ rate+ autonomy+ lease+ budget-]":                  1,
		"read_text_file reconcile allow unavailable [declared+ schema+ rate+ autonomy+ lease+ cost-source-]": 2,
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("receipts %q: %d, want %d (all: %v)", k, count[k], n, count)
		}
	}
}
