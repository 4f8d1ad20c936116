package decide

import (
	"syscall"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// A shell searching PATH execs /usr/local/bin/x and gets ENOENT: nothing was
// touched, so strict mode must not kill; an undeclared path that exists and
// was refused still kills, and an unresolved relative path fails closed.
func TestAbsentObjectsAreNotViolations(t *testing.T) {
	src := `apiVersion: klock/v1
agent: {id: a}
baseline: none
intents: [PROVIDES PROC:/usr/bin/true]
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.5, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`
	m, err := policy.Parse("a.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := policy.Compile(m)
	e := New(rs, policy.ModeStrict)
	ev := func(tr policy.Triple, errno syscall.Errno) event.Event {
		return event.Event{Triple: tr, Errno: int32(errno), Syscall: "execve", Blocked: errno == syscall.EACCES}
	}
	if v := e.Observe(ev(policy.ExecTriple("/usr/local/bin/true"), syscall.ENOENT)); v.Action != ActionAllow {
		t.Fatalf("exec of a missing path: %v", v.Action)
	}
	if v := e.Observe(ev(policy.FileTriple(policy.Consumes, "/etc/missing.conf"), syscall.ENOTDIR)); v.Action != ActionAllow {
		t.Fatalf("open of a missing path: %v", v.Action)
	}
	if v := e.Observe(ev(policy.FileTriple(policy.Consumes, "relative.conf"), syscall.ENOENT)); v.Action != ActionKill {
		t.Fatalf("an unresolved relative path must fail closed: %v", v.Action)
	}
	if v := e.Observe(ev(policy.FileTriple(policy.Consumes, ""), syscall.ENOENT)); v.Action != ActionAllow {
		t.Fatalf(`open(""), refused with ENOENT before any lookup: %v`, v.Action)
	}
	if v := e.Observe(ev(policy.ExecTriple("/usr/bin/false"), syscall.EACCES)); v.Action != ActionKill {
		t.Fatalf("a refused exec of an existing undeclared binary must kill: %v", v.Action)
	}
	var failed uint64
	for _, o := range e.Records().Observed {
		if o.Triple.Path == "/usr/local/bin/true" {
			failed = o.Failed
		}
	}
	if failed != 1 {
		t.Fatalf("the absent exec must stay in the log as a failed attempt (failed=%d)", failed)
	}
}
