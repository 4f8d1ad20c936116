package check

import (
	"time"

	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// Call is one tool invocation as the gateway sees it.
type Call struct {
	Tool string
	// Args are the arguments as decoded from JSON (numbers are float64).
	Args map[string]any
	// Context is the call's context (seed 004: agent_run_id, team_id, task
	// bindings). It comes from the operator or the orchestrator, never from
	// the model's arguments.
	Context map[string]any
	// RunID scopes per_run limits; empty is one run.
	RunID string
}

// Verdict is the outcome of Decide.
type Verdict int

const (
	Deny     Verdict = iota // refused: Decision.Err says why
	Allow                   // may be dispatched now
	Escalate                // may be dispatched only after a human approves
)

func (v Verdict) String() string {
	return [...]string{"deny", "allow", "escalate"}[v]
}

// Decision is what Decide concluded for one call.
type Decision struct {
	Verdict Verdict
	// Err is the typed refusal when Verdict is Deny.
	Err *toolerr.Error
	// Tool is the declared contract (nil for an undeclared tool).
	Tool *policy.Tool
	// Check is the pipeline stage that decided (declared, schema, rate, ...;
	// "autonomy" for an allow or escalation).
	Check string
	// Why is the human-readable reason for an escalation.
	Why string
	// IdemKey is the idempotency key when the contract has mode key; the
	// gateway returns the stored result for a key it has seen.
	IdemKey string
	// Timeout is the deadline for the dispatch (contract, else category).
	Timeout time.Duration
	// Confidential: audit argument hashes only and redact outputs.
	Confidential bool
	// Governance: the escalation is a category D tool's first use in its
	// run; once approved, the gateway calls Pipeline.Governed.
	Governance bool
	// RetryKey identifies the call's arguments when its tool is not
	// idempotent (retry.go; "" otherwise); Retry: the call repeats one
	// that reached the tool in its run, so it escalated.
	RetryKey string
	Retry    bool
	// Use is what the call left in its tool's rate-limit counters (an
	// allowed or escalated call's): the gateway writes it into the
	// call's dispatch record, which a restart merges back (Merge).
	Use *Use
	// ArgsDigest is the gateway's keyed digest of the arguments in
	// confidential mode (what a receipt may hold instead of them).
	ArgsDigest string
	// Evidence is each stage's verdict, in pipeline order, ending with the
	// refusing stage's on a deny; the gateway adds its own (approval,
	// ownership, leases) and the receipts carry them all.
	Evidence []Evidence
}

func deny(check string, t *policy.Tool, e *toolerr.Error) Decision {
	e.Check = check
	return Decision{Verdict: Deny, Err: e, Tool: t, Check: check, Evidence: []Evidence{refusal(check, e)}}
}

// denyAfter is deny with the evidence of the stages passed before.
func denyAfter(ev []Evidence, check string, t *policy.Tool, e *toolerr.Error) Decision {
	d := deny(check, t, e)
	d.Evidence = append(ev, d.Evidence...)
	return d
}
