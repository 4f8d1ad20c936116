package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/internal/termsafe"
	"github.com/spf13/cobra"
)

// exitNoDaemon: klock ps / kill found no klockd, or it refused the request.
const exitNoDaemon = 3

func daemonError(err error) error {
	code := exitNoDaemon
	if errors.Is(err, daemon.ErrNoSession) {
		code = exitInvalid
	}
	return &exitError{code: code, err: err}
}

// byteSize is n in B, KiB, MiB or GiB, one decimal.
func byteSize(n uint64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%dB", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
}

func newPS() *cobra.Command {
	var (
		asJSON bool
		socket string
	)
	c := &cobra.Command{
		Use:   "ps",
		Short: "List the sessions klockd is running",
		Long: `ps lists the sessions the klockd daemon runs: id, agent, the agent's pid,
mode, start time, state (starting, running, killing; with "lease store
unreachable since T" while a fleet's etcd does not answer its heartbeats,
and "frozen" for a permissive session frozen meanwhile), the uid that created
it, the bytes its agent sent and received through its network wall ("-"
without NET intents) and the command. Sessions run embedded in klock run (no klockd) are not
listed. A caller that is not root sees its own sessions.

Exit status: 0; 3 when klockd is not running or refused the request.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := daemon.Dial(socket)
			if err != nil {
				return daemonError(err)
			}
			defer cl.Close()
			list, err := cl.PS()
			if err != nil {
				return daemonError(err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if list == nil {
					list = []daemon.SessionInfo{}
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tAGENT\tPID\tMODE\tSTARTED\tSTATE\tBY UID\tNET OUT/IN\tCOMMAND")
			for _, s := range list {
				pid := "-"
				if s.PID != 0 {
					pid = fmt.Sprint(s.PID)
				}
				traffic := "-"
				if n := s.Network; n != nil {
					traffic = byteSize(n.OutBytes) + "/" + byteSize(n.InBytes)
				}
				// Another klock-group user's agent name and command: printable.
				state := s.State
				if st := s.LeaseStall; st != nil {
					state += " (lease store unreachable since " + st.Since.Local().Format(time.TimeOnly)
					if st.Frozen {
						state += ", frozen"
					}
					state += ")"
				}
				if len(s.NotEnforcing) > 0 {
					state += " (WALL NOT ENFORCING: " + strings.Join(s.NotEnforcing, ", ") + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, termsafe.String(s.Agent), pid, s.Mode,
					s.Start.Local().Format(time.DateTime), state, s.UID, traffic, termsafe.String(strings.Join(s.Command, " ")))
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the sessions as JSON")
	c.Flags().StringVar(&socket, "socket", "", "klockd's socket (default $"+daemon.SocketEnv+", else "+daemon.DefaultSocket+")")
	return c
}
