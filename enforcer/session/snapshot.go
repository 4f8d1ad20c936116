//go:build linux

package session

import (
	"context"
	"io"
	"path/filepath"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// BackupsDir is where a workdir's pre-flight backups live.
func BackupsDir(workdir string) string {
	if workdir == "" {
		return "/var/lib/klock/backups"
	}
	return filepath.Join(workdir, ".klock", "backups")
}

// Backup is the Snapshotter of klock run: snapshot.Take over what the
// kernel wall lets the agent change, under BackupsDir(workdir). progress,
// when a terminal, shows a bar for large trees.
func Backup(progress io.Writer) Snapshotter {
	return func(ctx context.Context, rs *policy.Ruleset, id string) (Restorer, error) {
		opts := snapshot.Options{Dir: BackupsDir(rs.Workdir), Session: id}
		if rs.Workdir != "" {
			// chmod, chown, utimes and xattrs are not Landlock rights: the
			// agent can change the metadata of any file it owns, CONSUMES-only
			// ones included. Detection kills such a session; backing up the
			// whole workdir lets the rollback undo it too.
			opts.Scopes = append(snapshot.WallScopes(rs), snapshot.Scope{Path: rs.Workdir, Tree: true})
		}
		if progress != nil {
			opts.Progress = snapshot.TerminalProgress(progress)
		}
		s, err := snapshot.Take(ctx, rs, opts)
		if err != nil {
			return nil, err
		}
		return restorer{s}, nil
	}
}

type restorer struct{ s *snapshot.Snapshot }

func (r restorer) Restore(ctx context.Context) ([]vlog.RollbackOp, error) {
	rep, err := r.s.Restore(ctx)
	return RollbackOps(rep), err
}

// RollbackOps turns a restore report into the verification log's entries:
// every path that was changed back (unchanged paths are left out).
func RollbackOps(rep snapshot.Report) []vlog.RollbackOp {
	var ops []vlog.RollbackOp
	for _, e := range rep.Entries {
		if e.Action == snapshot.Unchanged {
			continue
		}
		ops = append(ops, vlog.RollbackOp{Path: e.Path, Action: string(e.Action), OK: e.Error == "", Error: e.Error})
	}
	return ops
}
