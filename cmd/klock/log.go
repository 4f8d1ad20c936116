package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

func newLog() *cobra.Command {
	var asJSON, verbose bool
	var manifest, dir string
	c := &cobra.Command{
		Use:   "log SESSION",
		Short: "Show a session's verification log: declared, observed, blocked, restored, unused",
		Long: `Log renders a session's verification log. SESSION is a session id (looked
up under the manifest's workdir with -m, under --dir, under ./.klock/sessions
and /var/lib/klock/sessions), a session directory, or a verification.json.`,
		Example: `  klock log -m agent.yaml 20261121T221530-a1b2c3
  klock log --json /srv/repo/.klock/sessions/20261121T221530-a1b2c3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var candidates []string
			if manifest != "" {
				m, err := policy.Load(manifest)
				if err != nil {
					return &exitError{code: exitInvalid, err: err}
				}
				candidates = append(candidates, filepath.Join(session.DefaultLogDir(m.Workdir), args[0]))
			}
			if dir != "" {
				candidates = append(candidates, filepath.Join(dir, args[0]))
			}
			candidates = append(candidates, args[0], filepath.Join(".klock", "sessions", args[0]), filepath.Join(session.DefaultLogDir(""), args[0]))
			for _, p := range candidates {
				if _, err := os.Stat(p); err != nil {
					continue
				}
				l, err := vlog.Read(p)
				if err != nil {
					return &exitError{code: exitInvalid, err: err}
				}
				return vlog.Render(cmd.OutOrStdout(), l, vlog.RenderOptions{JSON: asJSON, Verbose: verbose})
			}
			return &exitError{code: exitInvalid, err: fmt.Errorf("no session %q in %v (pass -m MANIFEST or --dir)", args[0], candidates)}
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print verification.json itself")
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "list every baseline intent and every observed triple")
	c.Flags().StringVarP(&manifest, "manifest", "m", "", "find the session under this manifest's workdir")
	c.Flags().StringVar(&dir, "dir", "", "find the session under this sessions directory")
	return c
}
