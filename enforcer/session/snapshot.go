//go:build linux

package session

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/klocklabs/klock/enforcer/decide"
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
	return func(ctx context.Context, p Preflight) (Restorer, error) {
		rs, agent := p.Ruleset, p.AgentUID
		// Only what the agent's uid could change is backed up (a /tmp/**
		// scope holds every user's files): snapshot.Options.AgentUID.
		opts := snapshot.Options{Dir: BackupsDir(rs.Workdir), Session: p.ID, AgentUID: &agent, AgentGIDs: p.AgentGIDs, Others: p.Others, Ready: p.Ready}
		if rs.Workdir != "" {
			// chmod, chown, utimes and xattrs are not Landlock rights: the
			// agent can change the metadata of any file it owns, CONSUMES-only
			// ones included. Detection kills such a session; backing up the
			// whole workdir lets the rollback undo it too.
			opts.Scopes = append(snapshot.WallScopes(rs), snapshot.Scope{Path: rs.Workdir, Tree: true})
		}
		// Outside them, the agent can still change the metadata of the
		// files it owns (and utimes or user.* xattrs of those it may
		// write): their metadata, not their content, is recorded where
		// such files live, so that the rollback of a detected chmod there
		// puts it back (a change elsewhere is reported as not undone).
		if p.Scratch != nil {
			opts.MetaScopes = snapshot.MetaScopesAt(rs, agent, p.Scratch)
		} else {
			opts.MetaScopes = snapshot.MetaScopes(rs, agent)
		}
		if p.PrivateTmp {
			// The agent's /tmp and /var/tmp are not the host's, and
			// start empty: the host's are out of its reach, so not
			// walked, and never touched by a rollback (Exclude).
			if opts.Scopes == nil {
				opts.Scopes = snapshot.WallScopes(rs)
			}
			opts.Scopes, opts.MetaScopes = outsideTmp(opts.Scopes), outsideTmp(opts.MetaScopes)
			opts.Exclude = append(opts.Exclude, policy.TmpDirs...)
		}
		if progress != nil {
			opts.Progress = snapshot.TerminalProgress(progress)
		}
		s, err := snapshot.Take(ctx, rs, opts)
		for i := 1; i < takeAttempts && errors.Is(err, snapshot.ErrChanged) && ctx.Err() == nil; i++ {
			s, err = snapshot.Take(ctx, rs, opts)
		}
		if err != nil {
			return nil, err
		}
		return restorer{s}, nil
	}
}

// takeAttempts bounds the backup's attempts when the tree changed under
// it in a way it cannot record consistently (snapshot.ErrChanged: a
// hard-link group's first name removed while its others stay): a shared
// scope, the host's /tmp, changes while it is walked, and a new attempt
// sees the tree after the change. Past that, the session does not start
// and says why.
const takeAttempts = 3

// outsideTmp drops the scopes in /tmp or /var/tmp (a private tmp's); never
// nil (Take reads nil as "the wall's scopes").
func outsideTmp(in []snapshot.Scope) []snapshot.Scope {
	out := []snapshot.Scope{}
	for _, s := range in {
		if !policy.InTmp(s.Path) {
			out = append(out, s)
		}
	}
	return out
}

type restorer struct{ s *snapshot.Snapshot }

// Reclaims are the files of other sessions' leases a rollback puts back
// all the same: Whole, which the agent changed (snapshot.Reclaim), and
// Names, whose name alone it moved (snapshot.ReclaimName: the inode goes
// back to its name, and what the holder wrote into it since stays).
type Reclaims struct{ Whole, Names []string }

// Existed is snapshot.Snapshot.Existed.
func (r restorer) Existed(path string) (known, existed bool) { return r.s.Existed(path) }

// HiddenNames is snapshot.Snapshot.HiddenNames.
func (r restorer) HiddenNames(path string) int { return r.s.HiddenNames(path) }

// OtherNames is snapshot.Snapshot.OtherNames.
func (r restorer) OtherNames(path string) []string { return r.s.OtherNames(path) }

// Restore puts back what only covers (nil: everything the backup holds),
// leaving the new paths the agent's uid does not own (another process's)
// and what leave covers (another session's lease) but reclaim.
func (r restorer) Restore(ctx context.Context, only []snapshot.Scope, leave []snapshot.Region, reclaim Reclaims) ([]vlog.RollbackOp, error) {
	opts := []snapshot.RestoreOption{snapshot.SpareOthersNew(), snapshot.Leave(leave...),
		snapshot.Reclaim(reclaim.Whole...), snapshot.ReclaimName(reclaim.Names...)}
	if only != nil {
		// A path the agent changed that the backup holds nothing of is a
		// failure of the rollback, and the log says so.
		opts = append(opts, snapshot.Only(only...), snapshot.ReportUnrecorded())
	}
	rep, err := r.s.Restore(ctx, opts...)
	return RollbackOps(rep), err
}

// RollbackRoots is what a strict kill rolls back: the whole workdir, which
// is the agent's, and outside it only what the agent was seen to touch
// (seen: the session's observed triples). A path it changed is a root
// with everything below it (a renamed directory moves its subtree); a path
// it only read or linked to is a root by itself (a hard link made in the
// scope can change the inode of a file it names, and listing a shared
// directory must not pull in everything in it). Shared scopes such as
// /tmp/** hold other processes' files, and what they changed while the
// session ran must survive the rollback.
//
// It returns nil (everything the backup holds) when events were lost or a
// file was seen at a path that could not be resolved: the agent may have
// changed paths nobody can name, and putting back a stranger's change is
// the lesser harm than leaving one of the agent's. Removing a stranger's
// new file is not: every rollback spares the new paths the agent's uid
// does not own (snapshot.SpareOthersNew), which it cannot have made.
func RollbackRoots(workdir string, lost uint64, seen []policy.Triple) []snapshot.Scope {
	if lost > 0 {
		return nil
	}
	roots := []snapshot.Scope{}
	if workdir != "" {
		roots = append(roots, snapshot.Scope{Path: workdir, Tree: true})
	}
	for _, t := range seen {
		if t.Type != policy.ObjFile {
			continue
		}
		if !filepath.IsAbs(t.Path) {
			return nil
		}
		roots = append(roots, snapshot.Scope{Path: t.Path, Tree: policy.Changing.Has(t.Predicate)})
	}
	return roots
}

// rollbackRoots is RollbackRoots for the engine's records. A triple whose
// every occurrence failed (refused, or no such file) changed nothing, and
// its path needs no restoring, even when it could not be resolved; nor
// does a judgement of what an operation on another name needed
// (Observation.Referred).
func rollbackRoots(workdir string, rec decide.Records) []snapshot.Scope {
	seen := make([]policy.Triple, 0, len(rec.Observed))
	named := map[string]bool{}
	for _, o := range rec.Observed {
		if o.Failed < o.Count && !o.Referred {
			seen = append(seen, o.Triple)
			named[o.Triple.Path] = true
		}
	}
	// A file changed through a name the session gave it (changedPaths).
	changed, _ := changedPaths(rec)
	for _, p := range changed {
		if !named[p] {
			seen = append(seen, policy.FileTriple(policy.Mutates, p))
		}
	}
	return RollbackRoots(workdir, rec.LostTotal, seen)
}

// LoggedRollbackRoots is RollbackRoots for a session's verification log
// (klock rollback after the fact). A logged FILE triple that does not
// parse makes it nil, like an unresolved path, and so do an incomplete log
// (vlog.Log.Incomplete) and a name that was not UTF-8 (JSON kept U+FFFD for
// its bytes).
func LoggedRollbackRoots(workdir string, lg *vlog.Log) []snapshot.Scope {
	if lg.Incomplete() {
		return nil // what the agent touched was never written down
	}
	var seen []policy.Triple
	for _, o := range lg.Observed {
		if o.Count > 0 && o.Failed >= o.Count || o.Referred {
			continue // changed nothing (rollbackRoots)
		}
		pred, obj, ok := strings.Cut(o.Triple, " ")
		if !ok || !strings.HasPrefix(obj, "FILE:") {
			continue
		}
		p, err := policy.ParsePredicate(pred)
		if err != nil {
			return nil
		}
		if strings.ContainsRune(obj, utf8.RuneError) {
			// JSON holds text: a name that was not UTF-8 came back with
			// U+FFFD for its bytes, and no longer names the file.
			return nil
		}
		path := strings.TrimPrefix(obj, "FILE:")
		if lg.Container != nil {
			// A container's log names its paths; its backup holds the
			// host's.
			h, ok := (&Container{Mounts: lg.Container.Mounts}).ToHost(path)
			if !ok {
				continue // the container's own (a tmpfs): gone with it
			}
			path = h
		}
		seen = append(seen, policy.FileTriple(p, path))
	}
	return RollbackRoots(workdir, lg.Lost.Total, seen)
}

// RollbackOps turns a restore report into the verification log's entries:
// every path that was changed back (unchanged paths are left out).
func RollbackOps(rep snapshot.Report) []vlog.RollbackOp {
	var ops []vlog.RollbackOp
	for _, e := range rep.Entries {
		if e.Action == snapshot.Unchanged {
			continue
		}
		op := vlog.RollbackOp{Path: e.Path, Action: string(e.Action), OK: e.Error == "", Error: e.Error, Why: e.Why}
		if e.Holder != "" {
			// Another session's file, put back all the same (Reclaim).
			op.Reclaimed, op.Why = true, e.Holder
		}
		ops = append(ops, op)
	}
	return ops
}
