package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/termsafe"
	"github.com/klocklabs/klock/snapshot"
)

// leaseOptions adds to a rollback's options the regions other sessions'
// leases cover (session.OthersLeases), telling w what it leaves, or refuses.
func leaseOptions(ctx context.Context, w io.Writer, id string, start, end time.Time, touch []snapshot.Scope, leaveHeld bool) ([]snapshot.RestoreOption, error) {
	live, during, err := session.OthersLeases(ctx, id, start, end, touch)
	if err != nil {
		return nil, &exitError{code: exitRefused, err: fmt.Errorf("cannot tell which paths other sessions' leases cover, so the rollback could undo their work: %w; fix the cause, or run again with --force to restore regardless of leases", err)}
	}
	if len(live) > 0 && !leaveHeld {
		return nil, &exitError{code: exitRefused, err: session.HeldRefusal(live)}
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
