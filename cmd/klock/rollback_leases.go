package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/termsafe"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// othersLeases sorts the other sessions' changing FILE leases that
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
func othersLeases(ctx context.Context, id string, start, end time.Time, touch []snapshot.Scope) (live, during []lease.Lease, err error) {
	store, err := session.HostLeases()
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

// heldRefusal is klock rollback's refusal to restore what live sessions
// hold.
func heldRefusal(live []lease.Lease) error {
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
	return &exitError{code: exitRefused, err: errors.New(b.String())}
}

// leaseOptions adds to a rollback's options the regions other sessions'
// leases cover (see othersLeases), telling w what it leaves, or refuses.
func leaseOptions(ctx context.Context, w io.Writer, id string, start, end time.Time, touch []snapshot.Scope, leaveHeld bool) ([]snapshot.RestoreOption, error) {
	live, during, err := othersLeases(ctx, id, start, end, touch)
	if err != nil {
		return nil, &exitError{code: exitRefused, err: fmt.Errorf("cannot tell which paths other sessions' leases cover, so the rollback could undo their work: %w; fix the cause, or run again with --force to restore regardless of leases", err)}
	}
	if len(live) > 0 && !leaveHeld {
		return nil, heldRefusal(live)
	}
	regions := session.LeaseRegions(append(during, live...))
	for _, r := range regions {
		fmt.Fprintf(w, "klock: leaving %s as it is: %s\n", termsafe.String(r.Pattern.String()), termsafe.String(r.Why))
	}
	if len(regions) == 0 {
		return nil, nil
	}
	return []snapshot.RestoreOption{snapshot.Leave(regions...)}, nil
}
