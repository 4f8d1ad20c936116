package main

import (
	"fmt"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/spf13/cobra"
)

func newKill() *cobra.Command {
	var socket string
	c := &cobra.Command{
		Use:   "kill SESSION",
		Short: "End a session klockd is running",
		Long: `kill ends a klockd session at once: the whole session cgroup is killed
(cgroup.kill), files are rolled back from the pre-flight backup, and the
verification log records the kill; the klock run that started the session
exits as killed. A caller that is not root may kill only its own sessions.

Exit status: 0; 1 when klockd runs no such session; 3 when klockd is not
running or refused the request.`,
		Example: `  klock ps
  sudo klock kill 20250101T120000-a1b2c3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := daemon.Dial(socket)
			if err != nil {
				return daemonError(err)
			}
			defer cl.Close()
			if err := cl.Kill(args[0]); err != nil {
				return daemonError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "killed %s\n", args[0])
			return nil
		},
	}
	c.Flags().StringVar(&socket, "socket", "", "klockd's socket (default $"+daemon.SocketEnv+", else "+daemon.DefaultSocket+")")
	return c
}
