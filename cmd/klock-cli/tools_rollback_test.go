package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/control"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/spf13/cobra"
)

// TestRollbackListsExpiredCalls: a compensation past its window is listed
// apart from one that failed, with why.
func TestRollbackListsExpiredCalls(t *testing.T) {
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	printRollback(cmd, control.RollbackReply{Run: "r1", Results: []gateway.RollbackResult{
		{CallID: "call_2", Tool: "issue_refund", Rollback: "void_refund", OK: true},
		{CallID: "call_1", Tool: "issue_refund", Rollback: "void_refund", Expired: true, Message: "call call_1 (issue_refund) is past its rollback window (24h from issue, ended 2026-11-02T12:00:00Z)"},
	}})
	want := "call_2 (issue_refund) via void_refund: undone\ncall_1 (issue_refund) via void_refund: EXPIRED, NOT undone: call call_1 (issue_refund) is past its rollback window"
	if !strings.HasPrefix(out.String(), want) {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}
