//go:build linux

package session

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/termsafe"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// A rollback after the session (klock rollback): what it may restore, and
// what it must leave, decided from the session's log, the backup and the
// other sessions' leases, as a strict kill's rollback decides
// (rollback.go). The command only wires flags to them.

// RollbackLimit is what a rollback after the session (klock rollback)
// restores: what the session's
// verification log says the agent touched (LoggedRollbackRoots),
// or everything the backup holds (nil) with the reason.
// started and ended are when the session ran, from its log (zero when
// unknown; an INCOMPLETE log has a start and no end).
func RollbackLimit(workdir, logPath, id string) (roots []snapshot.Scope, started, ended time.Time, why string) {
	if logPath == "" {
		if workdir == "" {
			return nil, time.Time{}, time.Time{}, "no manifest (-m) or --log to find the session's verification log"
		}
		logPath = filepath.Join(DefaultLogDir(workdir), id)
	}
	lg, err := vlog.Read(logPath)
	if err != nil {
		return nil, time.Time{}, time.Time{}, fmt.Sprintf("no verification log for the session (%v)", err)
	}
	if lg.Incomplete() {
		return nil, lg.Start, time.Time{}, "the session's verification log is INCOMPLETE (the session did not end: klock was stopped before it wrote what the agent touched)"
	}
	roots = LoggedRollbackRoots(workdir, lg)
	if roots == nil {
		return nil, lg.Start, lg.End, "the verification log reports lost events or an unresolved path: what the agent touched is not fully known"
	}
	return roots, lg.Start, lg.End, ""
}

// LaterChanges refuses a rollback that would undo what changed after the
// session ended (its agent was gone by then: someone else's work) unless
// the operator asked for it (klock rollback --include-later). A restore that was interrupted is finished
// without asking (it already began undoing).
//
// What a restore put back and nobody touched since is klock's own doing,
// not news (snapshot.ChangedSince follows it path by path): undoing
// sessions newest first goes through, and rolling a session back twice
// too. A restore's time is not a cut-off: one that ran after the user's
// edit would hide the edit.
func LaterChanges(root string, s *snapshot.Snapshot, ended time.Time, opts []snapshot.RestoreOption) error {
	_, interrupted, err := snapshot.RestoreState(root, s.Session())
	if err != nil || interrupted || ended.IsZero() {
		return nil
	}
	changed, err := s.ChangedSince(ended, opts...)
	if err != nil {
		return fmt.Errorf("cannot tell what changed after the session ended, so the rollback could undo someone else's work: %w; fix the cause, or run again with --include-later to restore regardless", err)
	}
	if len(changed) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d path(s) changed after the session ended (%s), so not by its agent: a rollback would undo those changes:", len(changed), ended.UTC().Format(time.RFC3339))
	for i, p := range changed {
		if i == 20 {
			fmt.Fprintf(&b, "\n  … %d more", len(changed)-i)
			break
		}
		b.WriteString("\n  " + termsafe.String(p))
	}
	b.WriteString("\nReview them, then run again with --include-later to restore them too")
	return errors.New(b.String())
}

// OthersLeases sorts the other sessions' changing FILE leases that
// concern a rollback of session id, which ran from start to end (end zero:
// not known, or still running), and would restore touch (its roots, or the
// backup's scopes):
//
//   - live: held now by another session, on a path the rollback would
//     restore. Restoring it would change files under a running agent that
//     holds them: refused, unless --leave-held.
//   - during: held by another session at some time while this one ran,
//     ended since. What is there is that session's work (the leases kept
//     this one out of it): always left, as a strict kill leaves it.
func OthersLeases(ctx context.Context, id string, start, end time.Time, touch []snapshot.Scope) (live, during []lease.Lease, err error) {
	store, err := HostLeases()
	if err != nil {
		return nil, nil, err
	}
	all, err := store.List(ctx, lease.Filter{EndedSince: start})
	if err != nil {
		return nil, nil, err
	}
	for _, x := range all {
		if x.Holder.Session == id || !policy.Changing.Has(x.Predicate) {
			continue
		}
		if x.Resource.Type == 0 {
			r, err := lease.ParseResource(x.Object)
			if err != nil {
				continue
			}
			x.Resource = r
		}
		if x.Resource.Type != policy.ObjFile {
			continue
		}
		switch {
		case x.State == lease.Active && touches(touch, x.Resource.Path):
			live = append(live, x)
		case x.State != lease.Active && (end.IsZero() || !x.AcquiredAt.After(end)):
			during = append(during, x)
		}
	}
	return live, during, nil
}

// touches reports whether a rollback restoring roots could change a path
// pattern p covers.
func touches(roots []snapshot.Scope, p policy.PathPattern) bool {
	for _, r := range roots {
		m := policy.MatchExact
		if r.Tree {
			m = policy.MatchSubtree
		}
		if lease.PathOverlap(policy.PathPattern{Path: r.Path, Match: m}, p) {
			return true
		}
	}
	return false
}

// HeldRefusal is a rollback's refusal to restore what live sessions hold
// (klock rollback --leave-held restores the rest).
func HeldRefusal(live []lease.Lease) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d lease(s) of running sessions cover paths this rollback would restore; restoring them would change files under an agent that holds them:", len(live))
	for i, x := range live {
		if i == 10 {
			fmt.Fprintf(&b, "\n  … %d more (klock leases lists them)", len(live)-i)
			break
		}
		fmt.Fprintf(&b, "\n  session %s (agent %s) holds %s %s (lease %s)", termsafe.String(x.Holder.Session), termsafe.String(x.Holder.Agent), x.Predicate, termsafe.String(x.Object), x.ID)
	}
	fmt.Fprintf(&b, "\nWait for it to end, end it (klock kill %s), or run again with --leave-held to restore the rest and leave what it holds as it is", termsafe.String(live[0].Holder.Session))
	return errors.New(b.String())
}
