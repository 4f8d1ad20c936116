package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/termsafe"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
	"github.com/spf13/cobra"
)

// backupsRoot finds the backups directory from --dir or the manifest's workdir.
func backupsRoot(manifest, dir string) (string, error) {
	switch {
	case dir != "":
		return dir, nil
	case manifest != "":
		m, err := policy.Load(manifest)
		if err != nil {
			return "", &exitError{code: exitInvalid, err: err}
		}
		return session.BackupsDir(m.Workdir), nil
	}
	return "", &exitError{code: exitUsage, err: fmt.Errorf("say where the backups are: -m MANIFEST (its workdir's .klock/backups) or --dir DIR")}
}

// rollbackOptions are klock rollback's flags; run is the command.
type rollbackOptions struct {
	manifest, dir, logPath                      string
	asJSON, all, includeLater, leaveHeld, force bool
}

func newRollback() *cobra.Command {
	o := &rollbackOptions{}
	c := &cobra.Command{
		Use:   "rollback SESSION",
		Short: "Restore what a session's agent changed to its pre-flight state",
		Long: `Rollback restores, from the session's pre-flight backup, what the agent
changed: contents, modes, owners, times, xattrs, inode flags, symlinks and
hard links back as they were, and every path it created removed. It also
undoes a session that ended normally. Outside the wall's scopes the agent
can change only metadata (of the files its uid owns or may write): the
backup recorded that metadata where such files live (/tmp, /var/tmp,
/dev/shm, /run/lock, the agent's runtime directory and home, its
directories above the workdir, the paths the manifest names), and a path
the log says the agent changed that the backup holds nothing of is
listed as failed: that change stays.

As a strict kill does, it restores the whole workdir and, outside it, only
the paths the session's verification log says the agent touched: a shared
scope such as /tmp/** holds other processes' files, and what they changed
meanwhile stays. Without the log (pass -m, or --log), when it reports lost
events, or when it is INCOMPLETE (klock was killed during the session), it
restores everything the backup holds, and says so. Either way a path made
since the backup that the agent's uid does not own stays: the agent cannot
have made it (listed as spared). --all restores everything and removes
every new path.

What changed there after the session ended is not its agent's (it was
gone): when the session's log says when it ended and some path it would
restore changed since, rollback refuses and lists them; --include-later
restores them too (--all as well: it widens what is restored, not when).

Other sessions' leases (klock leases) are respected as a strict kill
respects them. What another session's lease let it change while this one
ran (MUTATES, DELETES, RENAMES or PROVIDES on files) is its work, which
this session's leases kept it out of: it is left as it is, and rollback
says so. A running session's lease on a path rollback would restore
refuses the rollback, naming the session: restoring would change files
under an agent that holds them. Wait for it to end, end it (klock kill),
or pass --leave-held to restore the rest and leave what it holds. --force
ignores leases altogether (neither refuses nor leaves anything), for when
the lease store cannot answer. --all does not widen into other sessions'
leases.
What a restore put back (of this session or another one of the same
workdir) and nobody changed since is klock's own doing, not a later
change: undoing sessions newest first goes through. A restore that only
ran later does not make a user's edit klock's.

A restore is journaled: if it is interrupted (even by kill -9), running
rollback again resumes it and converges to the same tree.

Exit status: 0 restored; 1 some paths could not be restored (listed) or
the backup could not be opened; 2 usage; 3 refused, nothing changed:
paths it would restore changed after the session ended (listed; review
them, then --include-later), or a running session holds a lease on them
(named; --leave-held), or the lease store could not say (--force).`,
		Example: `  sudo klock rollback -m agent.yaml 20261121T221530-a1b2c3
  sudo klock backups ls -m agent.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: o.run,
	}
	c.Flags().StringVarP(&o.manifest, "manifest", "m", "", "find the backups under this manifest's workdir")
	c.Flags().StringVar(&o.dir, "dir", "", "backups directory (default <workdir>/.klock/backups)")
	c.Flags().BoolVar(&o.asJSON, "json", false, "print the restore report as JSON")
	c.Flags().BoolVar(&o.all, "all", false, "restore everything the backup holds, not only what the agent touched")
	c.Flags().BoolVar(&o.includeLater, "include-later", false, "also undo what changed after the session ended (refused otherwise)")
	c.Flags().StringVar(&o.logPath, "log", "", "the session's verification log (default <workdir>/.klock/sessions/SESSION)")
	c.Flags().BoolVar(&o.leaveHeld, "leave-held", false, "leave what running sessions hold leases on as it is, and restore the rest (refused otherwise)")
	c.Flags().BoolVar(&o.force, "force", false, "ignore other sessions' leases: restore what they hold and what they changed while this session ran")
	return c
}

// run restores a session's backup: what the agent touched (its log says)
// or everything, past other sessions' leases and refusing later changes
// unless told, as the command's help says.
func (o *rollbackOptions) run(cmd *cobra.Command, args []string) error {
	root, err := backupsRoot(o.manifest, o.dir)
	if err != nil {
		return err
	}
	s, err := snapshot.Open(root, args[0])
	if err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	workdir := ""
	if o.manifest != "" {
		m, err := policy.Load(o.manifest)
		if err != nil {
			return &exitError{code: exitInvalid, err: err}
		}
		workdir = m.Workdir
	}
	roots, started, ended, why := session.RollbackLimit(workdir, o.logPath, args[0])
	opts := o.scope(cmd.ErrOrStderr(), s, roots, why)
	// Other sessions' leases: what they held while this one ran is
	// their work, and what running ones hold is not restored under
	// them (--leave-held leaves it, --force ignores leases).
	if !o.force {
		touch := roots
		if touch == nil || o.all {
			touch = s.Manifest().Scopes
		}
		if started.IsZero() {
			started = s.Manifest().Created
		}
		more, err := leaseOptions(cmd.Context(), cmd.ErrOrStderr(), args[0], started, ended, touch, o.leaveHeld)
		if err != nil {
			return err
		}
		opts = append(opts, more...)
	}
	// --all widens what is restored, not when: what changed after
	// the session ended is still someone else's work.
	if !o.includeLater {
		if err := session.LaterChanges(root, s, ended, opts); err != nil {
			return &exitError{code: exitRefused, err: err}
		}
	}
	rep, err := s.Restore(cmd.Context(), opts...)
	o.printReport(cmd.OutOrStdout(), args[0], rep)
	if failed := rep.Failed(); err != nil || len(failed) > 0 {
		for _, f := range failed {
			fmt.Fprintf(os.Stderr, "failed: %s: %s\n", termsafe.String(f.Path), termsafe.String(f.Error))
		}
		if err == nil {
			err = fmt.Errorf("%d path(s) could not be restored; fix the cause and run klock rollback again (it resumes)", len(failed))
		}
		return &exitError{code: exitInvalid, err: err}
	}
	return nil
}

// scope is what the restore covers: everything with --all; else what the
// session's log says the agent touched (roots), or, without them,
// everything the backup holds but the new paths the agent's uid does not
// own, saying so (why).
func (o *rollbackOptions) scope(stderr io.Writer, s *snapshot.Snapshot, roots []snapshot.Scope, why string) []snapshot.RestoreOption {
	if o.all {
		return []snapshot.RestoreOption{snapshot.All()}
	}
	opts := []snapshot.RestoreOption{snapshot.SpareOthersNew()}
	if roots == nil {
		spared := ""
		if uid := s.Manifest().AgentUID; uid != nil {
			spared = fmt.Sprintf(" but the paths made since that uid %d (the agent's) does not own: another process made them (--all removes those too)", *uid)
		}
		fmt.Fprintf(stderr, "klock: %s: restoring everything the backup holds%s\n", why, spared)
	} else {
		opts = append(opts, snapshot.Only(roots...), snapshot.ReportUnrecorded())
	}
	return opts
}

// printReport prints the restore's report: as JSON with --json, else each
// path changed and a one-line total.
func (o *rollbackOptions) printReport(w io.Writer, id string, rep snapshot.Report) {
	if o.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return
	}
	for _, e := range rep.Changed() {
		fmt.Fprintf(w, "%-10s %s\n", e.Action, termsafe.String(e.Path))
	}
	fmt.Fprintf(w, "session %s: %d path(s) restored or removed, %d unchanged", id, len(rep.Changed()), rep.Count(snapshot.Unchanged))
	if rep.Resumed {
		fmt.Fprint(w, " (finished an interrupted restore)")
	}
	fmt.Fprintln(w)
}

func newBackups() *cobra.Command {
	var manifest, dir string
	c := &cobra.Command{
		Use:   "backups",
		Short: "List or garbage-collect pre-flight backups",
	}
	c.PersistentFlags().StringVarP(&manifest, "manifest", "m", "", "the backups under this manifest's workdir")
	c.PersistentFlags().StringVar(&dir, "dir", "", "backups directory (default <workdir>/.klock/backups)")
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the sessions that have a backup",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			root, err := backupsRoot(manifest, dir)
			if err != nil {
				return err
			}
			infos, err := snapshot.List(root)
			if err != nil {
				return &exitError{code: exitInvalid, err: err}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(infos)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tCREATED\tENTRIES\tFILES\tBYTES\tNEW BYTES")
			for _, i := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", i.Session, i.Created.Format("2006-01-02 15:04:05"), i.Entries, i.Files, i.Bytes, i.NewBytes)
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	var (
		keep   int
		gcJSON bool
	)
	gc := &cobra.Command{
		Use:   "gc --keep N",
		Short: "Keep the newest N session backups; delete the rest and unreferenced content",
		Long: `gc keeps the newest N session backups, deletes the others, then the
content no kept backup references, and prints what it removed and freed
(--json: the report as JSON). Each deleted session is recorded in the
backups directory (collected.jsonl), so klock rollback of it says it was
collected, when, and what is left to do, rather than that a file is missing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keep < 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("--keep must be >= 0")}
			}
			root, err := backupsRoot(manifest, dir)
			if err != nil {
				return err
			}
			rep, err := snapshot.GC(root, keep)
			if err != nil {
				return &exitError{code: exitInvalid, err: err}
			}
			if gcJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), rep.Summary())
			return err
		},
	}
	gc.Flags().IntVar(&keep, "keep", 10, "how many of the newest session backups to keep")
	gc.Flags().BoolVar(&gcJSON, "json", false, "print the report as JSON")
	c.AddCommand(ls, gc)
	return c
}
