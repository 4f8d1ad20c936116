package check

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/toolerr"
)

// FuzzToolArgs feeds arbitrary JSON arguments and context to every refund
// agent tool: Decide must never panic, and a denial must be a typed error
// of a known class with a message.
func FuzzToolArgs(f *testing.F) {
	f.Add("issue_refund", `{"customer_id":"c_42","transaction_id":"t","amount_usd":20,"reason_code":"DUPLICATE"}`, `{"task":{"customer_id":"c_42"},"account":{"tier":"smb"}}`)
	f.Add("get_account", `{"customer_id":["c_42"]}`, `{"task":{"customer_id":["c_42"]}}`)
	f.Add("draft_email", `{"customer_id":"c_42","body":null}`, `{"task.customer_id":"c_42"}`)
	f.Add("issue_refund", `{"amount_usd":1e309}`, `{}`)
	f.Add("send_email", `{"draft_id":{"a":[1,2,{}]}}`, `null`)
	p, err := New(example(f, "refund-agent.yaml"), WithClock(func() time.Time { return time.Unix(0, 0) }))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tool, args, ctx string) {
		var a, c map[string]any
		if json.Unmarshal([]byte(args), &a) != nil {
			return
		}
		_ = json.Unmarshal([]byte(ctx), &c)
		d := p.Decide(&Call{Tool: tool, Args: a, Context: c, RunID: args})
		if d.Verdict == Deny {
			if d.Err == nil || !toolerr.Valid(d.Err.Class) || d.Err.Message == "" {
				t.Fatalf("untyped denial: %+v", d.Err)
			}
		}
	})
}
