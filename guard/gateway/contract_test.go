package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// TestMustBelongToThroughLookup: the lookup tool is called (and audited)
// with the owner argument; a transaction the customer does not own never
// reaches issue_refund, nor does one whose ownership cannot be checked.
func TestMustBelongToThroughLookup(t *testing.T) {
	g, st := refundGateway(t)
	effects := 0
	dispatch := func(context.Context) (Outcome, error) {
		effects++
		return Outcome{Result: json.RawMessage(`{"refund_id":"rf_1"}`)}, nil
	}
	if _, te := g.CallWith(context.Background(), refundCall(), dispatch, transactions); te != nil {
		t.Fatalf("owned transaction: %v", te)
	}
	c := refundCall()
	c.Args["transaction_id"] = "t9"
	_, te := g.CallWith(context.Background(), c, dispatch, transactions)
	if te == nil || te.Class != toolerr.SandboxViolation || te.Reason != "not_owned" || effects != 1 {
		t.Fatalf("foreign transaction: %+v, effects %d", te, effects)
	}
	c.Args["transaction_id"] = "t2"
	c.RunID = "r2" // per_run 3 counts the refused calls too
	_, te = g.Call(context.Background(), c, dispatch)
	if te == nil || te.Reason != "lookup_unavailable" || effects != 1 {
		t.Fatalf("no way to look up: %+v, effects %d", te, effects)
	}
	c.RunID = "r3"
	failing := func(context.Context, *check.Call) (Outcome, error) { return Outcome{}, errors.New("connection reset") }
	_, te = g.CallWith(context.Background(), c, dispatch, failing)
	if te == nil || te.Reason != "lookup_failed" || effects != 1 {
		t.Fatalf("failed lookup: %+v, effects %d", te, effects)
	}
	st.Audit.Close()
	data, _ := os.ReadFile(st.AuditPath)
	if n := strings.Count(string(data), `"tool":"get_transactions"`); n < 4 {
		t.Fatalf("lookups not audited (%d records):\n%s", n, data)
	}
}

const contractManifest = `apiVersion: klock/v1
agent: {id: contract-01}
intents: []
declared_tools:
  - name: meter_read
    blast_radius: read
    side_effects: READ
    category: B
    output_schema:
      kwh: {type: number}
      note: {type: string, nullable: true}
  - name: issue_refund
    blast_radius: local
    side_effects: REVERSIBLE-WRITE
    autonomy: {unsupervised: always}
    rollback: {mechanism: "void_refund(refund_id)", window: 24h}
    input_schema:
      amount_usd: {type: number}
    audit_logging: {records: [actor, amount_usd, refund_id, timestamp], CONFIDENTIAL}
  - name: draft
    blast_radius: local
    side_effects: REVERSIBLE-WRITE
    autonomy: {unsupervised: always}
    rollback: {mechanism: discard the draft}
  - name: void_refund
    blast_radius: local
    side_effects: IRREVERSIBLE-WRITE
    input_schema:
      refund_id: {type: string}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`

func contractGateway(t *testing.T, confidential bool) (*Gateway, *Stores) {
	t.Helper()
	doc := strings.Replace(contractManifest, ", CONFIDENTIAL", map[bool]string{true: ", confidential: true", false: ""}[confidential], 1)
	m, err := policy.Parse("contract.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	g, st, err := Open(m, Layout{Dir: t.TempDir(), Agent: m.Agent.ID}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return g, st
}

func answer(doc string) Dispatch {
	return func(context.Context) (Outcome, error) {
		return Outcome{Result: json.RawMessage(doc), Structured: json.RawMessage(doc)}, nil
	}
}

// TestOutputContractAndStoppingRule: a non-nullable number that comes back
// null or as "null" is withheld as tool_internal_error; a nullable null
// passes; after 3 consecutive errors the tool is stopped for the run.
func TestOutputContractAndStoppingRule(t *testing.T) {
	g, _ := contractGateway(t, false)
	call := func(doc string) *toolerr.Error {
		_, te := g.Call(context.Background(), &check.Call{Tool: "meter_read", RunID: "r1"}, answer(doc))
		return te
	}
	if te := call(`{"kwh":123.5,"note":null}`); te != nil {
		t.Fatalf("nullable null: %v", te)
	}
	for _, bad := range []string{`{"kwh":null,"note":"x"}`, `{"kwh":"null","note":"x"}`, `{"note":"x"}`} {
		if te := call(bad); te == nil || te.Class != toolerr.InternalError || te.Reason != "output_schema" {
			t.Fatalf("%s: %+v", bad, te)
		}
	}
	te := call(`{"kwh":1}`)
	if te == nil || te.Class != toolerr.Restricted || te.Reason != "stopped" {
		t.Fatalf("after 3 consecutive errors: %+v", te)
	}
	if _, te := g.Call(context.Background(), &check.Call{Tool: "meter_read", RunID: "r2"}, answer(`{"kwh":1}`)); te != nil {
		t.Fatalf("another run: %v", te)
	}
}

// TestRollbackWhenTheSessionIsKilled: the REVERSIBLE-WRITE calls of the
// killed run are compensated newest first, with the argument taken from the
// result; a prose mechanism is reported as not undone; every one is audited.
func TestRollbackWhenTheSessionIsKilled(t *testing.T) {
	g, st := contractGateway(t, false)
	var undone []string
	invoke := func(_ context.Context, c *check.Call) (Outcome, error) {
		undone = append(undone, c.Tool+":"+c.Args["refund_id"].(string))
		return Outcome{Result: json.RawMessage(`{"voided":true}`)}, nil
	}
	for i, id := range []string{"rf_1", "rf_2"} {
		// Two refunds, not one retried: a non-idempotent tool's repeat
		// would wait for a human (check's retry rule).
		if _, te := g.CallWith(context.Background(), &check.Call{Tool: "issue_refund", Args: map[string]any{"amount_usd": 5.0 + float64(i)}, RunID: "r1"},
			answer(`{"refund_id":"`+id+`"}`), invoke); te != nil {
			t.Fatal(te)
		}
	}
	if _, te := g.CallWith(context.Background(), &check.Call{Tool: "draft", RunID: "r1"}, answer(`{}`), invoke); te != nil {
		t.Fatal(te)
	}
	if _, te := g.CallWith(context.Background(), &check.Call{Tool: "issue_refund", Args: map[string]any{"amount_usd": 1.0}, RunID: "other"},
		answer(`{"refund_id":"rf_9"}`), invoke); te != nil {
		t.Fatal(te)
	}
	res, err := g.Rollback(context.Background(), "r1", "session s1 killed: violation")
	if !errors.Is(err, ErrRollback) || len(res) != 3 {
		t.Fatalf("rollback: %v %+v", err, res)
	}
	if strings.Join(undone, ",") != "void_refund:rf_2,void_refund:rf_1" {
		t.Fatalf("compensations run: %v", undone)
	}
	if res[0].Tool != "draft" || res[0].OK || !strings.Contains(res[0].Message, "names no tool") {
		t.Fatalf("prose mechanism: %+v", res[0])
	}
	if res, err := g.Rollback(context.Background(), "r1", "again"); err != nil || len(res) != 0 {
		t.Fatalf("a run is compensated once: %v %v", res, err)
	}
	st.Audit.Close()
	data, _ := os.ReadFile(st.AuditPath)
	if n := strings.Count(string(data), `"event":"rollback"`); n != 3 {
		t.Fatalf("%d rollback records:\n%s", n, data)
	}
}

// TestAuditRecordsNamedValues: the values audit_logging.records names are in
// the result record (refund_id from the result, amount_usd from the
// arguments); in confidential mode only their keyed digests are.
func TestAuditRecordsNamedValues(t *testing.T) {
	for _, confidential := range []bool{false, true} {
		g, st := contractGateway(t, confidential)
		if _, te := g.Call(context.Background(), &check.Call{Tool: "issue_refund", Args: map[string]any{"amount_usd": 5.5}, RunID: "r"},
			answer(`{"refund_id":"rf_secret"}`)); te != nil {
			t.Fatal(te)
		}
		st.Audit.Close()
		data, _ := os.ReadFile(st.AuditPath)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		var rec struct {
			Recorded     map[string]any    `json:"recorded"`
			RecordedHMAC map[string]string `json:"recorded_hmac"`
		}
		json.Unmarshal([]byte(lines[len(lines)-1]), &rec)
		if !confidential && (rec.Recorded["refund_id"] != "rf_secret" || rec.Recorded["amount_usd"] != 5.5) {
			t.Fatalf("recorded: %s", lines[len(lines)-1])
		}
		if confidential && (strings.Contains(string(data), "rf_secret") || !strings.HasPrefix(rec.RecordedHMAC["refund_id"], "hmac-sha256:")) {
			t.Fatalf("confidential: %s", data)
		}
	}
}
