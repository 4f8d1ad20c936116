//go:build linux

package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// amendGate is the decide.AmendGate of a permissive session that holds
// leases in store as h (age: the Wait-Die age its manifest's leases were
// granted with; ttl: theirs). Each amendment is one more lease of h, so
// the session's Heartbeat(h) renews it and its Release(h) frees it with
// the others; an amendment never waits (decide.LeaseGate).
//
// Where the operation has not taken effect (a wall refused it) and the
// wall widens while the agent runs (widens: bpf-lsm, whose rules the
// amendment updates so the agent's retry goes through), a changing
// amendment's path is added to the session's backup before it is granted
// (backupBeforeGrant), so a rollback restores what the retry changes.
//
// Run wires it for a permissive session that holds leases, before the
// engine is made.
func amendGate(ctx context.Context, store lease.Store, h lease.Holder, age time.Time, ttl time.Duration, backup Restorer, widens bool) decide.AmendGate {
	o := decide.LeaseGateOptions{Store: store, Holder: h, Age: age, TTL: ttl, Context: ctx}
	if widens {
		o.Before = func(r decide.AmendRequest) error { return backupBeforeGrant(ctx, backup, r) }
	}
	return decide.LeaseGate(o)
}

// moreBackup is a Restorer that can record more paths while the session
// runs (the session's own: snapshot.Snapshot.Add).
type moreBackup interface {
	Add(ctx context.Context, scopes ...snapshot.Scope) ([]snapshot.Scope, error)
}

// Add records scopes into the pre-flight backup (snapshot.Snapshot.Add).
func (r restorer) Add(ctx context.Context, scopes ...snapshot.Scope) ([]snapshot.Scope, error) {
	return r.s.Add(ctx, scopes...)
}

// errNoMoreBackup: the session's backup cannot record another path.
var errNoMoreBackup = errors.New("the session's backup cannot record more paths")

// backupBeforeGrant adds what r's amendment lets the agent change on its
// retry to the session's backup: the path of a FILE triple that changes
// the file system (MUTATES, DELETES, RENAMES, PROVIDES: each is undone by
// a rollback only if the backup covers its path), when the operation was
// refused (it has not taken effect, so the path is as it was). Removing or
// renaming a directory moves what is below it: a directory is backed up
// whole then. A session without a backup has nothing to add to (its log
// already says no rollback is possible); a backup that cannot take the
// path refuses the amendment.
func backupBeforeGrant(ctx context.Context, backup Restorer, r decide.AmendRequest) error {
	t := r.Triple
	if backup == nil || !r.Blocked || t.Type != policy.ObjFile || !policy.Changing.Has(t.Predicate) {
		return nil
	}
	more, ok := backup.(moreBackup)
	if !ok {
		return errNoMoreBackup
	}
	sc := snapshot.Scope{Path: t.Path}
	if t.Predicate == policy.Deletes || t.Predicate == policy.Renames {
		if fi, err := os.Lstat(t.Path); err == nil && fi.IsDir() {
			sc.Tree = true
		}
	}
	if _, err := more.Add(ctx, sc); err != nil {
		return fmt.Errorf("the backup of %s before the amendment failed: %w", sc, err)
	}
	return nil
}
