package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/klocklabs/klock/guard/approval"
	"github.com/klocklabs/klock/guard/approval/etcdqueue"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/internal/termsafe"
	"github.com/spf13/cobra"
)

// approvalQueue is the host's approval queue: the fleet's on etcd when
// klockd shares this host's state with a fleet, else the state
// directory's.
func approvalQueue(stateDir string) (approval.Queue, func(), error) {
	if stateDir == "" {
		stateDir = gateway.StateDir()
	}
	return etcdqueue.OpenHost(gateway.Layout{Dir: stateDir}.Approvals())
}

func newApprovals() *cobra.Command {
	var stateDir string
	var all, asJSON bool
	c := &cobra.Command{
		Use:   "approvals",
		Short: "List tool and model calls waiting for a human (HITL)",
		Long: `approvals lists the tool calls a gateway (klock mcp, klock tools serve)
escalated to a human: an IRREVERSIBLE-WRITE, an autonomy condition that did
not hold, an agent in HITL mode, or the lethal trifecta; and the model calls
klock meter's Token Guard escalated (an estimate above 80 % of a
cost_envelope max; TOOL is model:<name>). Each waits until
klock approve or klock deny decides it, or its deadline passes (a timeout
denies). The queue is on disk, shared by every gateway using the same
--state-dir, and survives restarts. On a host whose klockd shares its
state with a fleet (the fleet marker), the queue is the fleet's on etcd:
it lists the calls waiting on every host, with the HOST that filed each.

Exit status: 0, or 125 when the queue cannot be read (the fleet's etcd
unreachable, say).`,
		Example: `  klock approvals               # pending requests
  klock approvals --all         # with decided and expired ones
  klock approvals --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, closeQ, err := approvalQueue(stateDir)
			if err != nil {
				return &exitError{code: exitNoStart, err: err}
			}
			defer closeQ()
			list, err := s.List(!all)
			if err != nil {
				return &exitError{code: exitNoStart, err: err}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if list == nil {
					list = []*approval.Request{}
				}
				return enc.Encode(list)
			}
			if len(list) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no pending approvals")
				return nil
			}
			return printApprovals(cmd.OutOrStdout(), list, etcdqueue.Fleet(s))
		},
	}
	c.Flags().StringVar(&stateDir, "state-dir", "", "the gateway's state directory (default as klock mcp; unused in a fleet)")
	c.Flags().BoolVar(&all, "all", false, "include decided and expired requests")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// printApprovals is klock approvals' table; a fleet's has a HOST column
// (the host whose gateway filed the request).
func printApprovals(w io.Writer, list []*approval.Request, hosts bool) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	head := "ID\tSTATE\tAGENT\tTOOL\tEXPIRES\tWHY\tARGS"
	if hosts {
		head = "ID\tSTATE\tHOST\tAGENT\tTOOL\tEXPIRES\tWHY\tARGS"
	}
	fmt.Fprintln(tw, head)
	for _, r := range list {
		args := string(r.Args)
		var compact bytes.Buffer
		if json.Compact(&compact, r.Args) == nil {
			args = compact.String() // one line
		}
		if args == "" {
			// A keyed digest (hmac-sha256:...) since confidential
			// hashing is keyed; older requests hold a bare SHA-256.
			d := r.ArgsSHA256
			if !strings.Contains(d, ":") {
				d = "sha256:" + d
			}
			args = d[:min(len(d), 28)] + "… (confidential)"
		}
		if len(args) > 80 {
			args = args[:77] + "..."
		}
		exp := "-"
		if r.State == approval.Pending {
			exp = time.Until(r.Deadline).Round(time.Second).String()
		}
		host := ""
		if hosts {
			host = termsafe.String(r.Host) + "\t"
		}
		// The agent chose the arguments (and the names the
		// reason quotes): the approver sees them printable.
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, host, termsafe.String(r.Agent), termsafe.String(r.Tool), exp,
			termsafe.String(r.Why), termsafe.String(args))
	}
	return tw.Flush()
}

func decider() string {
	if u, err := user.Current(); err == nil {
		if s := os.Getenv("SUDO_USER"); s != "" && u.Uid == "0" {
			return s + " (sudo)"
		}
		return u.Username
	}
	return fmt.Sprintf("uid %d", os.Getuid())
}

func newDecide(approve bool) *cobra.Command {
	var stateDir, note string
	verb, past := "deny", "denied"
	if approve {
		verb, past = "approve", "approved"
	}
	c := &cobra.Command{
		Use:   verb + " ID",
		Short: map[bool]string{true: "Approve a pending tool call: the waiting gateway dispatches it", false: "Deny a pending tool call: the agent gets tool_restricted"}[approve],
		Long: fmt.Sprintf(`%s decides one request listed by klock approvals. The gateway that
filed it sees the decision within a fraction of a second: the waiting call
%s. An approval covers that one call (same tool, same arguments, same
run), once. In a fleet (the fleet marker) the queue is the fleet's on
etcd: a decision on any host reaches the gateway waiting on another, and
of two decisions at once exactly one is made.

Exit status: 0 %s; 1 the request was already decided or expired; 2 no
such request; 125 the queue cannot be written (the fleet's etcd
unreachable, say).`, verb,
			map[bool]string{true: "is dispatched and its result returned to the agent", false: "returns tool_restricted (approval_denied) to the agent"}[approve], past),
		Example: fmt.Sprintf(`  klock approvals
  klock %s ap_0123456789ab --note "checked with the customer"`, verb),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, closeQ, err := approvalQueue(stateDir)
			if err != nil {
				return &exitError{code: exitNoStart, err: err}
			}
			defer closeQ()
			r, err := s.Decide(args[0], approve, decider(), note)
			switch {
			case errors.Is(err, approval.ErrNotFound):
				return &exitError{code: exitUsage, err: fmt.Errorf("%v (klock approvals lists them; %s)", err, s)}
			case errors.Is(err, approval.ErrDecided):
				return &exitError{code: exitInvalid, err: err}
			case err != nil:
				return &exitError{code: exitNoStart, err: err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s of agent %s\n", past, r.ID, termsafe.String(r.Tool), termsafe.String(r.Agent))
			return nil
		},
	}
	c.Flags().StringVar(&stateDir, "state-dir", "", "the gateway's state directory (default as klock mcp; unused in a fleet)")
	c.Flags().StringVar(&note, "note", "", "why, recorded with the decision (and shown to the agent on a denial)")
	return c
}

func newApprove() *cobra.Command { return newDecide(true) }
func newDeny() *cobra.Command    { return newDecide(false) }
