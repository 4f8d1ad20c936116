package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/klocklabs/klock/enforcer/report"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/version"
	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

func newLog() *cobra.Command {
	var asJSON, verbose, asHTML bool
	var manifest, dir, auditPath, receiptsPath, run string
	c := &cobra.Command{
		Use:   "log SESSION",
		Short: "Show a session's verification log: declared, observed, blocked, restored, unused",
		Long: `Log renders a session's verification log. SESSION is a session id (looked
up under the manifest's workdir with -m, under --dir, under ./.klock/sessions
and /var/lib/klock/sessions), a session directory, or a verification.json.

--html writes one self-contained page instead (it loads nothing from the
network): the timeline with the violation, the kill and the rollback
marked, each violation with the intent that would have allowed it, the
files restored, the declared intents against their use, network peers,
leases and waits. With --audit and --receipts (a tool gateway's files) it
adds the gateway's decisions and spend for the session's run
(--gateway-run, default the session id, as klock run --gateway uses).`,
		Example: `  klock log -m agent.yaml 20261121T221530-a1b2c3
  klock log --json /srv/repo/.klock/sessions/20261121T221530-a1b2c3
  klock log --html -m agent.yaml 20261121T221530-a1b2c3 > report.html`,
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
				if asHTML {
					return logHTML(cmd, l, auditPath, receiptsPath, run)
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
	c.Flags().BoolVar(&asHTML, "html", false, "write a self-contained HTML report (timeline, violations, restored files, intents' use)")
	c.Flags().StringVar(&auditPath, "audit", "", "with --html: a tool gateway's audit.jsonl (or its directory) to show the session's tool calls from")
	c.Flags().StringVar(&receiptsPath, "receipts", "", "with --html: a receipts file to show the session's spend from")
	c.Flags().StringVar(&run, "gateway-run", "", "with --html: the gateway run id of the session's calls (default the session id)")
	c.MarkFlagsMutuallyExclusive("json", "html")
	return c
}

// logHTML writes the HTML report of l, with the gateway's records of its
// run when their files were given.
func logHTML(cmd *cobra.Command, l *vlog.Log, auditPath, receiptsPath, run string) error {
	if run == "" {
		run = l.Session
	}
	g, err := guardRecords(auditPath, receiptsPath, run)
	if err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	return report.HTML(cmd.OutOrStdout(), l, report.Options{Guard: g, Generator: "klock " + version.String()})
}
