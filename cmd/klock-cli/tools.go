package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/control"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

// toolsTarget finds the control socket of the gateway to govern.
type toolsTarget struct{ stateDir, agent, socket string }

func (t *toolsTarget) register(c *cobra.Command) {
	c.PersistentFlags().StringVar(&t.agent, "agent", "", "the agent id whose running gateway to change (its manifest's agent.id)")
	c.PersistentFlags().StringVar(&t.socket, "socket", "", "the gateway's control socket (default <state-dir>/gateway/<agent>/control.sock)")
	c.PersistentFlags().StringVar(&t.stateDir, "state-dir", "", "the gateway's state directory (default as klock mcp)")
}

func (t *toolsTarget) client() (*control.Client, error) {
	if t.socket != "" {
		return control.Dial(t.socket), nil
	}
	if t.agent == "" {
		return nil, errors.New("name the gateway: --agent AGENT_ID or --socket PATH")
	}
	dir := t.stateDir
	if dir == "" {
		dir = gateway.StateDir()
	}
	return control.Dial(gateway.Layout{Dir: dir, Agent: t.agent}.Control()), nil
}

func govErr(err error) error {
	if errors.Is(err, control.ErrUnreachable) {
		return &exitError{code: exitNoStart, err: err}
	}
	return &exitError{code: exitInvalid, err: err}
}

func newTools() *cobra.Command {
	var t toolsTarget
	c := &cobra.Command{
		Use:   "tools",
		Short: "Serve the HTTP tool proxy, and govern a running gateway's tools: list, disable, enable, limit, rollback",
		Long: `tools serve runs the HTTP tool proxy with plugins (see klock tools serve
--help). The other subcommands change a running gateway (klock mcp or klock
tools serve) through its control socket, without a restart (seed 004's
governance hooks). A
change narrows or restores what the manifest declared; it can never add a
tool. A disabled tool vanishes from tools/list and every call of it gets
tool_restricted.

Exit status: 0 done; 1 the gateway refused (unknown tool, bad limit);
125 no gateway listens on the socket.`,
		Example: `  klock tools list    --agent refund-agent-01
  klock tools disable --agent refund-agent-01 issue_refund --reason "incident INC-88"
  klock tools limit   --agent refund-agent-01 issue_refund --per-minute 2 --per-run 1
  klock tools enable  --agent refund-agent-01 issue_refund
  klock tools rollback --agent refund-agent-01 --run run_42`,
	}
	t.register(c)
	c.AddCommand(newToolsList(&t), newToolsDisable(&t), newToolsEnable(&t), newToolsLimit(&t), newToolsRollback(&t), newToolsServe())
	return c
}

// newToolsList is klock tools list: the gateway's tools with their state
// and limits, through its control socket.
func newToolsList(t *toolsTarget) *cobra.Command {
	var asJSON bool
	list := &cobra.Command{
		Use: "list", Short: "List the gateway's tools with their state and limits", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := t.client()
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			st, err := cl.Status()
			if err != nil {
				return govErr(err)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOOL\tCAT\tSIDE EFFECT\tSTATE\tPER RUN\tPER MIN\tTIMEOUT")
			for _, s := range st {
				state := "enabled"
				if s.Disabled != "" {
					state = "disabled: " + s.Disabled
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.Name, s.Category, s.Effect, state, s.Limits.PerRun, s.Limits.PerMinute, s.Timeout)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return list
}

// newToolsDisable is klock tools disable: the tool vanishes from
// tools/list and its calls are refused, until klock tools enable.
func newToolsDisable(t *toolsTarget) *cobra.Command {
	var reason string
	disable := &cobra.Command{
		Use: "disable TOOL", Short: "Disable a tool: hidden from tools/list, calls refused", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := t.client()
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if err := cl.Disable(args[0], reason); err != nil {
				return govErr(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "disabled %s\n", args[0])
			return nil
		},
	}
	disable.Flags().StringVar(&reason, "reason", "", "why (the agent sees it in the refusal)")
	return disable
}

// newToolsEnable is klock tools enable: it undoes klock tools disable.
func newToolsEnable(t *toolsTarget) *cobra.Command {
	return &cobra.Command{
		Use: "enable TOOL", Short: "Enable a tool disabled by klock tools disable", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := t.client()
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if err := cl.Enable(args[0]); err != nil {
				return govErr(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enabled %s\n", args[0])
			return nil
		},
	}
}

// newToolsLimit is klock tools limit: it narrows the rate-limit windows
// its flags name (governance may only narrow the manifest's).
func newToolsLimit(t *toolsTarget) *cobra.Command {
	var l policy.RateLimits
	limit := &cobra.Command{
		Use: "limit TOOL [--per-run N] [--per-minute N] [--per-hour N] [--per-day N]", Short: "Narrow a tool's rate limits below the manifest's (0 = the manifest's again)", Args: cobra.ExactArgs(1),
		Long: `limit narrows the windows it names; the others keep what governance set
before. Governance may only narrow: a limit above the manifest's is refused
(change and re-sign the manifest to allow more), and 0 removes governance's
limit on that window, leaving the manifest's. The limits and the disabled
tools persist in the gateway's state directory across restarts.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("per-run") && !cmd.Flags().Changed("per-minute") && !cmd.Flags().Changed("per-hour") && !cmd.Flags().Changed("per-day") {
				return &exitError{code: exitUsage, err: errors.New("give at least one of --per-run, --per-minute, --per-hour, --per-day")}
			}
			cl, err := t.client()
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			// Only the flags given: the other windows keep what governance set.
			given := func(flag string, v *int) *int {
				if cmd.Flags().Changed(flag) {
					return v
				}
				return nil
			}
			ch := check.LimitChange{PerRun: given("per-run", &l.PerRun), PerMinute: given("per-minute", &l.PerMinute),
				PerHour: given("per-hour", &l.PerHour), PerDay: given("per-day", &l.PerDay)}
			now, err := cl.Limit(args[0], ch)
			if err != nil {
				return govErr(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "limited %s; in force (0: none): per_run %d, per_minute %d, per_hour %d, per_day %d\n", args[0], now.PerRun, now.PerMinute, now.PerHour, now.PerDay)
			return nil
		},
	}
	limit.Flags().IntVar(&l.PerRun, "per-run", 0, "calls per run")
	limit.Flags().IntVar(&l.PerMinute, "per-minute", 0, "calls per minute (token bucket)")
	limit.Flags().IntVar(&l.PerHour, "per-hour", 0, "calls per hour")
	limit.Flags().IntVar(&l.PerDay, "per-day", 0, "calls per day")
	return limit
}
