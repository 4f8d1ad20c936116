package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/spf13/cobra"
)

func newEvents() *cobra.Command {
	var (
		socket, session, since, output string
		follow, all                    bool
	)
	c := &cobra.Command{
		Use:   "events",
		Short: "Stream klockd's event records (for a SIEM)",
		Long: `events streams klockd's records of the decisions that matter, one a line:
session start and end (with its verdict), scope violation, a declared
operation klock's wall refused, kill, each rollback step, DNS refusal,
lease grant, wait, die and revoke, and the tool gateways' approvals asked
and given, budget refusals, denied calls and the calls that ran (with what
their budget charged). --all adds every observed
triple the scope allowed.

-o json prints each record as one line of JSON valid against the schema
klock schema events prints (its "v" is the schema version). -o text is for
people.

--since replays the records klockd still holds (the last 4096) from that
time on ("10m" back from now, or an RFC 3339 time); without --follow the
stream ends there. With --follow it goes on until interrupted.

A reader never slows a session: one that reads too slowly loses records
and gets a "lost" record with how many, where they were. For a complete
record on disk use klockd --events-file. A caller that is not root sees
its own sessions' and leases' records.

Exit status: 0; 2 for a bad flag; 3 when klockd is not running or refused
the request.`,
		Example: `  klock events --follow -o json | my-shipper
  klock events --since 1h --session 20260102T150405-ab12cd`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "json" && output != "text" {
				return &exitError{code: exitUsage, err: fmt.Errorf("-o %q: want json or text", output)}
			}
			from, err := eventlog.ParseSince(since, time.Now())
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return streamEvents(ctx, cmd, socket, daemon.EventsRequest{Session: session, Since: from, All: all, Follow: follow}, output)
		},
	}
	f := c.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep streaming new records until interrupted")
	f.StringVar(&session, "session", "", "only this session's records")
	f.StringVar(&since, "since", "", "first replay the records klockd holds since `T` (10m, or an RFC 3339 time)")
	f.BoolVar(&all, "all", false, "add every observed triple (kind observed)")
	f.StringVarP(&output, "output", "o", "text", "json (one record a line) or text")
	f.StringVar(&socket, "socket", "", "klockd's socket (default $"+daemon.SocketEnv+", else "+daemon.DefaultSocket+")")
	return c
}

func streamEvents(ctx context.Context, cmd *cobra.Command, socket string, req daemon.EventsRequest, output string) error {
	cl, err := daemon.Dial(socket)
	if err != nil {
		return daemonError(err)
	}
	defer cl.Close()
	out := cmd.OutOrStdout()
	enc := json.NewEncoder(out)
	err = cl.Events(ctx, req, func(r eventlog.Record) error {
		if output == "json" {
			return enc.Encode(r)
		}
		_, err := fmt.Fprintln(out, eventlog.Text(r))
		return err
	})
	if err != nil {
		return daemonError(err)
	}
	return nil
}
