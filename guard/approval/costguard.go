package approval

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/klocklabs/klock/guard/tokenguard"
)

// CostApprover puts the Token Guard's escalations (an estimate above 80 %
// of a cost-envelope max) in this queue, next to the gateway's tool calls:
// klock approvals lists them, klock approve / deny decide them.
type CostApprover struct {
	Store Queue
	Agent string
	// Timeout is the request's deadline (a timeout denies).
	Timeout time.Duration
	// Wait bounds how long one invocation blocks (default: Timeout); still
	// pending then, it is refused with tokenguard.ErrApprovalPending and a
	// retry of the same invocation waits on the same request.
	Wait time.Duration
}

var _ tokenguard.Approver = (*CostApprover)(nil)

// costArgs is what the human sees of the invocation.
type costArgs struct {
	TokensIn  int64  `json:"estimated_tokens_in"`
	TokensOut int64  `json:"estimated_tokens_out"`
	Cost      string `json:"estimated_cost,omitempty"`
}

// Approve files (or finds) the request and waits for a decision. It
// returns true only for an approval. Every other outcome is an error the
// Token Guard wraps with ErrNotApproved: a denial names the request, who
// denied it and the note; an expired request wraps
// tokenguard.ErrApprovalTimeout, one still pending
// tokenguard.ErrApprovalPending; a queue that cannot be written wraps
// ErrStore (the invocation is refused either way).
func (a *CostApprover) Approve(ctx context.Context, req tokenguard.ApprovalRequest) (bool, error) {
	args := costArgs{TokensIn: req.Estimate.TokensIn, TokensOut: req.Estimate.TokensOut}
	if req.Estimate.Cost != nil {
		args.Cost = req.Estimate.Cost.String()
	}
	raw, _ := json.Marshal(args)
	fp := req.Fingerprint
	if fp == "" {
		var b [16]byte
		rand.Read(b[:])
		fp = hex.EncodeToString(b[:])
	}
	tool := req.Tool
	if tool == "" {
		tool = req.Subject
	}
	r, err := a.Store.Submit(Request{
		Agent: a.Agent, Tool: tool, Args: raw, ArgsSHA256: hashBytes(raw),
		Why:         "Token Guard: " + strings.Join(req.Near, "; "),
		Fingerprint: "cost:" + fp,
	}, a.Timeout)
	if err != nil {
		return false, err
	}
	wait := a.Wait
	if wait <= 0 || wait > a.Timeout {
		wait = a.Timeout
	}
	r, err = a.Store.Wait(ctx, r.ID, wait)
	if err != nil {
		return false, err
	}
	switch r.State {
	case Approved:
		if err := a.Store.MarkUsed(r.ID); err != nil {
			return false, err
		}
		return true, nil
	case Pending:
		return false, fmt.Errorf("%w: request %s (approve with `klock approve %s`; retry the same call to wait again, deadline %s)",
			tokenguard.ErrApprovalPending, r.ID, r.ID, r.Deadline.UTC().Format(time.RFC3339))
	case Expired:
		return false, fmt.Errorf("%w: request %s", tokenguard.ErrApprovalTimeout, r.ID)
	}
	note := ""
	if r.Note != "" {
		note = ": " + r.Note
	}
	return false, fmt.Errorf("request %s denied by %s%s", r.ID, r.DecidedBy, note)
}

func hashBytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
