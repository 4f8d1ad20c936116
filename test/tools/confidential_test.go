package tools

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

// confidentialTools are the tools of the confidential run: charge sees a
// confidential card (echoing what it got, and a text the redact pattern
// removes), refund is its rollback, wire waits for a human, processor is
// the one tool whose contract is not confidential (it may see the card).
const confidentialTools = `  - {name: charge, type: write, blast_radius: local, category: B, side_effects: REVERSIBLE-WRITE, timeout_ms: 30000,
     input_schema: {card: {type: string, confidential: true, pattern: '^[a-z2-7]+$'}, amount: {type: integer}},
     idempotency: {mode: key, key_source: 'hash(card, amount)'}, rollback: {mechanism: refund(card), window: session, restores: the charge},
     autonomy: {unsupervised: always}, audit_logging: {confidential: true, records: [card, amount], redact: ['\d{3}-\d{2}-\d{4}']}}
  - {name: refund, type: write, blast_radius: local, category: B, side_effects: READ, timeout_ms: 30000,
     input_schema: {card: {type: string, confidential: true}}, audit_logging: {confidential: true}}
  - {name: wire, type: write, blast_radius: local, category: B, side_effects: IRREVERSIBLE-WRITE, timeout_ms: 30000,
     input_schema: {card: {type: string, confidential: true}}, audit_logging: {confidential: true}}
  - {name: processor, type: read, blast_radius: read, category: B, side_effects: READ, timeout_ms: 30000,
     input_schema: {card: {type: string, confidential: true}}, audit_logging: {records: [card]}}
`

// Seed 004 §11 on the wire: in a confidential run the tools receive a
// confidential argument only as a handle, their text results are redacted,
// and when the run is over no file klock wrote (state, audit, approvals,
// idempotency and rate state, rollback journal, plugin session logs,
// receipts, events, its own log) holds any part of the plaintext. The one
// tool whose contract is not confidential receives the plaintext behind a
// handle passed back to it.
func TestConfidentialRunKeepsNoPlaintext(t *testing.T) {
	testutil.RequirePrivileged(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	var raw [60]byte
	rand.Read(raw[:])
	secret := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(raw[:])) // 96 characters

	plugins := filepath.Join(base, "plugins")
	echo := `read -r line
printf '{"output":{"seen":%s,"note":"customer ssn 123-45-6789 on file"},"cost":"0.01 USD"}\n' "$line"
`
	for _, name := range []string{"charge", "refund", "wire"} {
		plugin(t, plugins, name, `{"network":false,"filesystem":false}`, echo)
	}
	// processor tells what it got, and echoes it.
	write(t, filepath.Join(plugins, "processor", "plugin.json"),
		`{"name":"processor","version":"1.0.0","entry":"run.py","capabilities":["tool.processor.invoke"],"permissions":{"network":false,"filesystem":false}}`, 0o644)
	write(t, filepath.Join(plugins, "processor", "run.py"), `#!/usr/bin/python3
import hashlib, json, sys
card = json.loads(sys.stdin.readline())["args"]["card"]
print(json.dumps({"output": {"card_sha256": hashlib.sha256(card.encode()).hexdigest(), "handle": card.startswith("klock-handle:"), "echo": "got " + card}}))
`, 0o755)

	manifest := filepath.Join(base, "agent.yaml")
	write(t, manifest, fmt.Sprintf(`apiVersion: klock/v1
agent: {id: conf-agent-%d, version: 1.0.0}
mode: strict
workdir: %s
intents: []
declared_tools:
%scost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
grants:
  - {tool: charge, max_cost_per_invocation: "0.05 USD", max_total_cost: "1.00 USD"}
hitl: {default_mode: HOTL}
`, time.Now().UnixNano(), base, confidentialTools), 0o644)
	state, receipts := filepath.Join(base, "state"), filepath.Join(base, "receipts")
	logFile, err := os.Create(filepath.Join(base, "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	url, stop, _ := startServeLogged(t, base, nil, logFile, "-m", manifest, "--plugins", plugins, "--state-dir", state,
		"--receipts", receipts, "--control", filepath.Join(state, "c.sock"), "--events-file", filepath.Join(base, "events.jsonl"), "--approval-wait", "1s")

	// charge gets a handle, never the card; its result's SSN is removed.
	var got struct {
		Seen struct {
			Args map[string]any `json:"args"`
		} `json:"seen"`
		Note string `json:"note"`
	}
	r := post(t, url, fmt.Sprintf(`{"tool":"charge","args":{"card":%q,"amount":5}}`, secret))
	json.Unmarshal(r.Output, &got)
	handle, _ := got.Seen.Args["card"].(string)
	if !r.OK || !strings.HasPrefix(handle, "klock-handle:") || got.Note != "customer ssn [confidential section removed] on file" {
		t.Fatalf("charge: %+v (the plugin saw %v)", r, got)
	}
	// The handle passed back is the same card: the same idempotency key
	// (the first result, replayed) and the same handle to the tool.
	r = post(t, url, fmt.Sprintf(`{"tool":"charge","args":{"card":%q,"amount":5}}`, handle))
	json.Unmarshal(r.Output, &got)
	if !r.OK || got.Seen.Args["card"] != handle {
		t.Fatalf("charge with the handle: %+v", r)
	}
	if r := post(t, url, fmt.Sprintf(`{"tool":"refund","args":{"card":%q}}`, handle)); !r.OK || !strings.Contains(string(r.Output), handle) {
		t.Fatalf("refund with the handle: %+v", r)
	}
	// A refusal whose message would quote the card (cut short) keeps none
	// of it in the records; a handle this gateway never gave is refused.
	if r := post(t, url, fmt.Sprintf(`{"tool":"charge","args":{"card":"!%s","amount":1}}`, secret)); r.Class != "tool_invalid_args" || strings.Contains(r.Message, secret[:12]) {
		t.Fatalf("a card breaking the pattern: %+v", r)
	}
	if r := post(t, url, `{"tool":"charge","args":{"card":"klock-handle:forged","amount":1}}`); r.Class != "tool_invalid_args" || r.Reason != "unknown_handle" {
		t.Fatalf("a forged handle: %+v", r)
	}
	// An approval request is filed for wire: it keeps no card either.
	if r := post(t, url, fmt.Sprintf(`{"tool":"wire","args":{"card":%q}}`, secret)); r.Reason != "approval_pending" {
		t.Fatalf("wire: %+v", r)
	}
	// processor's contract is not confidential: a handle passed to it
	// opens to the card (it hashes what it got), records keep the handle, and
	// the card it echoes is the handle again on its way back.
	want := sha256.Sum256([]byte(secret))
	var proc struct {
		Sum    string `json:"card_sha256"`
		Handle bool   `json:"handle"`
		Echo   string `json:"echo"`
	}
	r = post(t, url, fmt.Sprintf(`{"tool":"processor","args":{"card":%q}}`, handle))
	json.Unmarshal(r.Output, &proc)
	if !r.OK || proc.Handle || proc.Sum != hex.EncodeToString(want[:]) {
		t.Fatalf("processor did not get the card behind the handle: %+v %+v", r, proc)
	}
	// What it echoes comes back as the handle the agent passed.
	if proc.Echo != "got "+handle {
		t.Fatalf("processor's echo reached the agent as %q, want the handle", proc.Echo)
	}
	stop()

	// A run declared confidential as a whole (--confidential): processor
	// gets the handle too.
	url, stop, _ = startServeLogged(t, base, nil, logFile, "-m", manifest, "--plugins", plugins, "--state-dir", state,
		"--receipts", receipts, "--control", filepath.Join(state, "c.sock"), "--confidential", "--run-id", "run_whole")
	r = post(t, url, fmt.Sprintf(`{"tool":"processor","args":{"card":%q}}`, secret))
	json.Unmarshal(r.Output, &proc)
	if !r.OK || !proc.Handle {
		t.Fatalf("processor in a --confidential run: %+v %+v", r, proc)
	}
	stop()

	files := grepTree(t, base, secret)
	if files < 10 {
		t.Fatalf("only %d files searched: the run did not write what it should have", files)
	}
}

// grepTree searches every file under dir for any 12 characters of secret,
// and returns how many files it searched.
func grepTree(t *testing.T, dir, secret string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		n++
		for i := 0; i+12 <= len(secret); i++ {
			if at := bytes.Index(data, []byte(secret[i:i+12])); at >= 0 {
				t.Errorf("%s holds the confidential card (characters %d-%d at byte %d)", path, i, i+12, at)
				break
			}
		}
		return nil
	})
	t.Logf("searched %d files klock wrote for the card", n)
	return n
}
