package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/spf13/cobra"
)

func newKill() *cobra.Command {
	var socket string
	c := &cobra.Command{
		Use:   "kill SESSION",
		Short: "End a session: klockd's at once, an embedded one by revoking its leases",
		Long: `kill ends a session. One klockd runs ends at once: the whole session cgroup
is killed (cgroup.kill), files are rolled back from the pre-flight backup,
the verification log records the kill, and the klock run that started the
session exits as killed (130). kill returns once the session has ended,
then revokes whatever lease of it is left (none, normally: a session
releases its leases after its rollback and its log).

A session klockd does not run (klock run embedded, or klock run of
another host's klockd socket) is ended through its leases: kill revokes
every lease it holds on this host, and its klock run, which watches them,
ends it as interrupted (killed, rolled back in strict mode, the log saying
its leases were revoked) at once or at its next heartbeat (a third of the
lease TTL, 20 s by default). Revoking frees what it held at once: a
session waiting for it (--wait) may then start before the revoked one has
rolled back, and that rollback leaves what the new session holds.

A caller that is not root may kill only its own klockd sessions.

Exit status: 0; 1 when there is no such session (klockd runs none by that
id, and it holds no lease on this host); 3 when klockd refused the request.`,
		Example: `  klock ps
  klock leases
  sudo klock kill 20250101T120000-a1b2c3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			ctx := cmd.Context()
			err := killInDaemon(ctx, socket, id)
			switch {
			case err == nil:
				n, _ := revokeLeases(ctx, id) // what it did not release, if anything
				fmt.Fprintf(cmd.OutOrStdout(), "killed %s\n", id)
				if n > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "revoked %d lease(s) it still held\n", n)
				}
				return nil
			case !errors.Is(err, daemon.ErrNoDaemon) && !errors.Is(err, daemon.ErrNoSession):
				return daemonError(err)
			}
			n, rerr := revokeLeases(ctx, id)
			if rerr != nil {
				return &exitError{code: exitNoDaemon, err: fmt.Errorf("session %s is not klockd's (%v), and its leases could not be revoked: %w", id, err, rerr)}
			}
			if n == 0 {
				why := "klockd runs no such session and it holds no lease on this host"
				return &exitError{code: exitInvalid, err: fmt.Errorf("no session %s: %s (%v)", id, why, err)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %d lease(s) of session %s: its klock run ends it (killed, rolled back in strict mode) at once or at its next heartbeat\n", n, id)
			return nil
		},
	}
	c.Flags().StringVar(&socket, "socket", "", "klockd's socket (default $"+daemon.SocketEnv+", else "+daemon.DefaultSocket+")")
	return c
}

// killInDaemon asks klockd to kill session id and waits until klockd no
// longer runs it (its rollback and log are done).
func killInDaemon(ctx context.Context, socket, id string) error {
	cl, err := daemon.Dial(socket)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.Kill(id); err != nil {
		return err
	}
	for {
		list, err := cl.PS()
		if err != nil {
			return nil // killed; whether it has ended cannot be told
		}
		if !slices.ContainsFunc(list, func(s daemon.SessionInfo) bool { return s.ID == id }) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// revokeLeases revokes every lease session id holds in the host's store.
func revokeLeases(ctx context.Context, id string) (int, error) {
	store, err := session.HostLeases()
	if err != nil {
		return 0, err
	}
	return store.Revoke(ctx, id)
}
