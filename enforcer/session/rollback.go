//go:build linux

package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// rollbackPlan is what a killed session's rollback works from.
type rollbackPlan struct {
	// only are the roots to restore (nil: everything the backup holds).
	only []snapshot.Scope
	// changed are the FILE paths the agent was seen to change (host
	// paths), its violations included; moved are those of them whose
	// name alone it moved (changedPaths).
	changed, moved []string
	leases         *leasing
	log            *slog.Logger
	self           intruder
}

// intruder is the session rolling back, as it names itself to a session
// whose file its agent changed.
type intruder struct {
	session, agent string
	// violations are the agent's violations by (host) path, for the notice.
	violations map[string]string
	// notices is the directory notices go to (Options.NoticeDir).
	notices string
}

// rollBack restores what p.only covers, leaving what other sessions'
// leases let them change while this one ran (Restorer's leave), and says
// in the log which paths it left and why. When the lease store cannot say
// what others held, nothing is restored: putting back a path another
// session changed would destroy its work, and klock rollback can still be
// run once the store answers.
//
// A file in another session's lease that this session's agent was seen
// to change (the wall let it: Landlock's is wider than the declaration,
// and a hard link or rename reaches an inode by another name) is put back
// all the same, to its state when this session began, its inode moved
// back to its name if the agent moved it (snapshot.Reclaim): restoring a
// file another session holds is never worse than leaving the intruder's
// change in it, or deleting it. That session is told (notice.go) and its
// log says what was put back.
func rollBack(ctx context.Context, r Restorer, p rollbackPlan) []vlog.RollbackOp {
	var others []lease.Lease
	var err error
	switch {
	case p.leases != nil && p.leases.stalledNow():
		// The store does not answer: asking would spend the time the
		// session's own leases surely hold.
		err = fmt.Errorf("%w: it did not answer the session's last heartbeat", lease.ErrUnreachable)
	case p.leases != nil:
		lctx, cancel := context.WithDeadline(ctx, p.leases.heldUntil())
		others, err = p.leases.othersChanging(lctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: no answer before the session's leases may run out", lease.ErrUnreachable)
		}
	}
	if err != nil && errors.Is(err, lease.ErrUnreachable) && p.leases.stillHeld() {
		return rollBackOwn(ctx, r, p, err)
	}
	if err != nil {
		p.log.Error("rollback not done: cannot tell which paths other sessions' leases cover", "error", err)
		return []vlog.RollbackOp{{Path: "*", Action: vlog.RollbackRestored, OK: false,
			Error: fmt.Sprintf("not rolled back: the lease store could not say which paths other sessions hold (%v), and restoring one of theirs would destroy their work; run klock rollback once it answers", err)}}
	}
	reclaim := inLeases(p.changed, others)
	names := inLeases(p.moved, others)
	ops, err := r.Restore(ctx, p.only, LeaseRegions(others), Reclaims{Whole: notIn(reclaim, names), Names: names})
	if err != nil {
		p.log.Error("rollback incomplete", "error", err)
		ops = append(ops, vlog.RollbackOp{Path: "*", Action: vlog.RollbackRestored, OK: false, Error: err.Error()})
	}
	notices := map[string][]vlog.Intrusion{}
	left := 0
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Reclaimed:
			x, ok := leaseCovering(op.Path, others)
			if !ok {
				continue
			}
			what := "changed it; put back to its state when this session began"
			if slices.Contains(names, op.Path) && op.Action == string(snapshot.MovedBack) {
				what = "moved it; moved back to its name, with what it holds now (the holder's since)"
			}
			op.Why = fmt.Sprintf("session %s's (agent %s, lease %s on %s): this session's agent %s, and session %s is told",
				x.Holder.Session, x.Holder.Agent, x.ID, x.Object, what, x.Holder.Session)
			notices[x.Holder.Session] = append(notices[x.Holder.Session], vlog.Intrusion{
				Time: time.Now(), Session: p.self.session, Agent: p.self.agent, Path: op.Path,
				What: p.self.violations[op.Path], PutBack: op.Action, OK: op.OK, Error: op.Error})
			p.log.Warn("rollback put back a file of another session's lease that this session's agent changed", "path", op.Path, "holder", x.Holder.Session)
		case op.Action == vlog.RollbackLeft:
			left++
			if touchedBy(op.Path, notIn(p.changed, reclaim)) {
				op.OK = false
				op.Error = "this session's agent changed it too, outside its own leases: that change is not undone, since the other session's work is there as well; inspect it"
				p.log.Error("rollback left a path this session's agent changed inside another session's lease", "path", op.Path, "lease", op.Why)
			}
		}
	}
	for holder, ns := range notices {
		if err := postNotices(p.self.notices, holder, p.self.session, ns); err != nil {
			p.log.Error("cannot tell the session whose file was put back", "session", holder, "error", err)
		}
	}
	if left > 0 {
		p.log.Warn(fmt.Sprintf("rollback left %d path(s) other sessions' leases cover (their work; klock log lists them)", left))
	}
	return ops
}

// rollBackOwn is the rollback of a session whose fleet store stopped
// answering while its leases still held: what other sessions hold is
// unknown, but nobody else can hold what this session's own leases
// cover, so that is restored; the rest of the roots is left, said so, for
// klock rollback once the store answers.
func rollBackOwn(ctx context.Context, r Restorer, p rollbackPlan, why error) []vlog.RollbackOp {
	own := intersectScopes(p.only, p.leases.ownScopes())
	p.log.Warn("the lease store does not answer: rolling back only what this session's own leases cover", "scopes", len(own), "error", why)
	ops, err := r.Restore(ctx, own, nil, Reclaims{})
	if err != nil {
		ops = append(ops, vlog.RollbackOp{Path: "*", Action: vlog.RollbackRestored, OK: false, Error: err.Error()})
	}
	return append(ops, vlog.RollbackOp{Path: "*", Action: vlog.RollbackLeft, OK: true,
		Why: fmt.Sprintf("only what this session's own leases cover was restored: the lease store could not say what other sessions hold (%v); run klock rollback for the rest once it answers", why)})
}

// intersectScopes is what both a scope of as and one of bs cover.
func intersectScopes(as, bs []snapshot.Scope) []snapshot.Scope {
	var out []snapshot.Scope
	for _, a := range as {
		for _, b := range bs {
			switch {
			case scopeCovers(a, b):
				out = append(out, b)
			case scopeCovers(b, a):
				out = append(out, a)
			}
		}
	}
	return out
}

func scopeCovers(a, b snapshot.Scope) bool {
	if a.Path == b.Path {
		return a.Tree || !b.Tree
	}
	return a.Tree && (a.Path == "/" || strings.HasPrefix(b.Path, strings.TrimSuffix(a.Path, "/")+"/"))
}

// inLeases are the paths some lease of ls covers.
func inLeases(paths []string, ls []lease.Lease) []string {
	var out []string
	for _, p := range paths {
		if _, ok := leaseCovering(p, ls); ok {
			out = append(out, p)
		}
	}
	return out
}

// leaseCovering is the first FILE lease of ls whose pattern covers p.
func leaseCovering(p string, ls []lease.Lease) (lease.Lease, bool) {
	for _, x := range ls {
		if x.Resource.Type == policy.ObjFile && x.Resource.Path.Covers(p) {
			return x, true
		}
	}
	return lease.Lease{}, false
}

// notIn is paths less those in drop.
func notIn(paths, drop []string) []string {
	if len(drop) == 0 {
		return paths
	}
	skip := make(map[string]bool, len(drop))
	for _, d := range drop {
		skip[d] = true
	}
	var out []string
	for _, p := range paths {
		if !skip[p] {
			out = append(out, p)
		}
	}
	return out
}

// changedPaths are the FILE paths the agent was seen to change (not
// every attempt failed), and moved: those of them whose name alone it
// moved (a rename, nothing else), whose content and metadata are not its
// doing. A link or rename's judgement of the rights its new name would
// give the inode (Observation.Referred) changed nothing at the old name;
// a change of content or metadata through a name the session gave an
// existing inode (Records.Aliases) changed the file at the names it had,
// each of which is changed too.
func changedPaths(rec decide.Records) (changed, moved []string) {
	nameOnly := map[string]bool{}
	add := func(p string, renamed bool) {
		if was, ok := nameOnly[p]; ok {
			nameOnly[p] = was && renamed
			return
		}
		nameOnly[p] = renamed
		changed = append(changed, p)
	}
	for _, o := range rec.Observed {
		t := o.Triple
		if t.Type != policy.ObjFile || !policy.Changing.Has(t.Predicate) || o.Failed >= o.Count || o.Referred {
			continue
		}
		add(t.Path, t.Predicate == policy.Renames)
		if t.Predicate == policy.Mutates {
			for _, p := range aliased(rec.Aliases, t.Path) {
				add(p, false)
			}
		}
	}
	for _, p := range changed {
		if nameOnly[p] {
			moved = append(moved, p)
		}
	}
	return changed, moved
}

// aliased are the names the inode at name had before the session gave it
// name, through every link and rename on the way (a link of a link).
func aliased(aliases map[string][]string, name string) []string {
	var out []string
	seen := map[string]bool{name: true}
	next := []string{name}
	for len(next) > 0 {
		n := next[0]
		next = next[1:]
		for _, p := range aliases[n] {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
				next = append(next, p)
			}
		}
	}
	return out
}

// violationsByPath are the agent's FILE violations' texts by host path
// (a container's are mapped through its mounts), the first for each.
func violationsByPath(rec decide.Records, c *Container) map[string]string {
	out := map[string]string{}
	for _, v := range rec.Violations {
		if v.Triple.Type != policy.ObjFile {
			continue
		}
		p := v.Triple.Path
		if c != nil {
			h, ok := c.ToHost(p)
			if !ok {
				continue
			}
			p = h
		}
		if _, ok := out[p]; !ok {
			out[p] = v.Error
		}
	}
	return out
}

// touchedBy reports whether p is one of paths, lies below one, or holds
// one below it (a new directory is left whole).
func touchedBy(p string, paths []string) bool {
	for _, c := range paths {
		if c == p || strings.HasPrefix(c, p+"/") || strings.HasPrefix(p, c+"/") {
			return true
		}
	}
	return false
}

// otherNames is r.OtherNames for the engine, whose paths are a
// container's own when c is set (the backup's are the host's).
func otherNames(r Restorer, c *Container) func(string) []string {
	if c == nil {
		return r.OtherNames
	}
	return func(p string) []string {
		h, ok := c.ToHost(p)
		if !ok {
			return nil
		}
		var out []string
		for _, q := range r.OtherNames(h) {
			if cp, ok := c.ToContainer(q); ok {
				out = append(out, cp)
			} else {
				out = append(out, q) // a host name the container cannot see: still the same file
			}
		}
		return out
	}
}
