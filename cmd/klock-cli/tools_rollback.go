package main

import (
	"errors"
	"fmt"

	"github.com/klocklabs/klock/guard/control"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/spf13/cobra"
)

// newToolsRollback is `klock tools rollback --run RUN`: the kill of a strict
// session reaches the gateway that served its tool calls, which runs the
// declared compensation of each REVERSIBLE-WRITE call of the run.
func newToolsRollback(t *toolsTarget) *cobra.Command {
	var run, reason string
	c := &cobra.Command{
		Use:   "rollback --run RUN [--reason TEXT]",
		Short: "Undo a killed run's REVERSIBLE-WRITE tool calls with their declared rollback",
		Long: `rollback tells a running gateway (klock mcp or klock tools serve) that the
session of run RUN was killed: it runs, newest first, the compensation each
REVERSIBLE-WRITE call of that run declared (its contract's rollback.mechanism,
e.g. void_refund(refund_id), with the argument taken from the call's result
or arguments), audits each and records each in a signed receipt (phase
rollback) in the gateway's receipts. The gateway keeps the compensations in
a journal beside its audit log, so they survive its restart. A run is
compensated once. RUN is the gateway's run id (--run-id of klock mcp / tools
serve); klock run --gateway SOCKET --gateway-run RUN sends this itself when
it kills a strict session.

A compensation works only within its contract's rollback.window when that
starts with a duration ("24h from issue"): a call past it is not
compensated but listed as EXPIRED (its receipt is incomplete, its audit
record says expired), and from then on the gateway treats that tool's
calls in the run as IRREVERSIBLE-WRITE (they need an approval).

Exit status: 0 every call undone (or none to undo), 1 some could not be
undone or had expired (listed; undo them by hand), 125 no gateway listens
on the socket.`,
		Example: `  klock tools rollback --agent refund-agent-01 --run run_42 --reason "session 20261125T1200-ab killed"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if run == "" {
				return &exitError{code: exitUsage, err: errors.New("--run RUN is required: the gateway's run id whose session was killed")}
			}
			cl, err := t.client()
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			out, err := cl.Rollback(run, reason)
			printRollback(cmd, out)
			if err != nil {
				if errors.Is(err, gateway.ErrRollback) {
					return &exitError{code: exitInvalid, err: err}
				}
				return govErr(err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&run, "run", "", "the run whose session was killed (required)")
	c.Flags().StringVar(&reason, "reason", "session killed (klock tools rollback)", "why, recorded in the audit and the receipts")
	return c
}

func printRollback(cmd *cobra.Command, out control.RollbackReply) {
	if len(out.Results) == 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "run %s: nothing to undo\n", out.Run)
	}
	for _, r := range out.Results {
		state := "undone"
		switch {
		case r.Expired:
			state = "EXPIRED, NOT undone: " + r.Message
		case !r.OK:
			state = "NOT undone: " + r.Message
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s (%s) via %s: %s\n", r.CallID, r.Tool, r.Rollback, state)
	}
}
