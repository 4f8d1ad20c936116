package main

import (
	"fmt"
	"io"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/guard/control"
	"github.com/spf13/cobra"
)

// gatewayBinding ties a klock run session to the gateway that served its
// tool calls, so a strict kill reaches the gateway: the files are restored
// by the session, what the tool calls did to the world by their declared
// compensations.
type gatewayBinding struct{ socket, run string }

func (g *gatewayBinding) register(c *cobra.Command) {
	c.Flags().StringVar(&g.socket, "gateway", "", "control socket of the tool gateway serving this agent (klock mcp / tools serve): a strict kill runs its REVERSIBLE-WRITE calls' rollbacks")
	c.Flags().StringVar(&g.run, "gateway-run", "", "the gateway's run id for this session's calls (its --run-id; default the session id). Given, those calls act for this session: they take no lease against its leases (KLIS: same agent, same session)")
}

// leaseGroup joins the session's leases with the gateway's calls of its
// run (lease.Holder.Group): a tool the agent calls through its gateway
// acts for the session, and does not conflict with what the session holds.
// Only with --gateway-run: the gateway's calls carry its --run-id.
func (g *gatewayBinding) leaseGroup() string {
	if g.socket == "" || g.run == "" {
		return ""
	}
	return "run:" + g.run
}

// killed tells the gateway a strict session was killed. A permissive
// session keeps its work, so its tool calls stand too. Whatever the
// gateway answers is printed; the session's own exit status is not changed
// (the kill already says what happened), but a rollback that did not
// complete is named with what to do.
func (g *gatewayBinding) killed(w io.Writer, res *session.Result, permissive bool) {
	if g.socket == "" || res == nil || !res.Killed || permissive {
		return
	}
	run := g.run
	if run == "" {
		run = res.ID
	}
	reason := fmt.Sprintf("klock session %s killed: %s", res.ID, res.Reason)
	out, err := control.Dial(g.socket).Rollback(run, reason)
	for _, r := range out.Results {
		state := "undone"
		if !r.OK {
			state = "NOT undone: " + r.Message
		}
		fmt.Fprintf(w, "klock: rollback of %s (%s) via %s: %s\n", r.CallID, r.Tool, r.Rollback, state)
	}
	if err != nil {
		fmt.Fprintf(w, "klock: the gateway's rollback of run %s is incomplete: %v\n  retry: klock tools rollback --socket %s --run %s\n", run, err, g.socket, run)
	}
}
