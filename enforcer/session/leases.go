package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// ErrLeaseConflict: a lease the session needs is held by another session,
// and it was not granted (at once, or within Options.LeaseWait). The error
// is a *LeaseConflictError.
var ErrLeaseConflict = errors.New("session: a lease the manifest needs is held by another session")

// LeaseConflictError is ErrLeaseConflict with the lease manager's last
// answer: Decision.Conflicts names each lease in the way (object,
// predicate, holder session and agent) and the session's own intent it
// conflicts with.
type LeaseConflictError struct {
	Decision lease.Decision
	// Waited is how long the session tried; Wait the --wait it had.
	Waited, Wait time.Duration
}

func (e *LeaseConflictError) Unwrap() error { return ErrLeaseConflict }

func (e *LeaseConflictError) Error() string {
	var b strings.Builder
	b.WriteString(ErrLeaseConflict.Error())
	cs := e.Decision.Conflicts
	if len(cs) == 0 {
		b.WriteString(" (the lease manager named none)")
		return b.String()
	}
	c := cs[0]
	on, kill := "", "klock kill "+c.Held.Holder.Session
	if c.Held.Host != "" {
		// A fleet's lease: the holder may run on another host, where
		// klock kill must be run.
		on = " on host " + c.Held.Host
		kill += " on " + c.Held.Host
	}
	fmt.Fprintf(&b, ": session %s (agent %s)%s holds %s %s (lease %s, since %s), which conflicts with this session's intent %s",
		c.Held.Holder.Session, c.Held.Holder.Agent, on, c.Held.Predicate, c.Held.Object, c.Held.ID,
		c.Held.AcquiredAt.UTC().Format(time.RFC3339), c.Claim.Intent)
	if n := len(cs) - 1; n > 0 {
		fmt.Fprintf(&b, "; and %d more conflict(s)", n)
		if others := holderSessions(cs[1:], c.Held.Holder.Session); len(others) > 0 {
			fmt.Fprintf(&b, ", with session(s) %s too", strings.Join(others, ", "))
		}
	}
	switch {
	case e.Wait > 0:
		fmt.Fprintf(&b, ". It waited %s (--wait %s) and the lease is still held", e.Waited.Round(time.Millisecond), e.Wait)
	case e.Decision.Outcome == lease.Wait:
		b.WriteString(". This session is older (Wait-Die: it would wait), but it was not asked to (--wait)")
	default:
		b.WriteString(". This session is younger (Wait-Die: it dies rather than wait), and was not asked to wait (--wait)")
	}
	fmt.Fprintf(&b, ". Fix: wait for it (klock run --wait DURATION, e.g. --wait 10m), end it (%s), or see who holds what (klock leases)", kill)
	return b.String()
}

// holderSessions lists the sessions of cs other than except, each once.
func holderSessions(cs []lease.Conflict, except string) []string {
	var out []string
	for _, c := range cs {
		if s := c.Held.Holder.Session; s != except && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// leaseClaims are the claims of every intent of rs that leases something
// (lease.FromIntent), each once, a declared path that FollowLinks
// resolved claimed at its target too (the kernel names the file there);
// baseline says which claims (by intent text) are the baseline's.
func leaseClaims(rs *policy.Ruleset) (claims []lease.Claim, baseline map[string]bool) {
	links := rs.Links()
	baseline = map[string]bool{}
	seen := map[string]bool{}
	add := func(c lease.Claim, base bool) {
		k := c.Predicate.String() + " " + c.Resource.String()
		if seen[k] {
			return
		}
		seen[k] = true
		claims = append(claims, c)
		if base {
			baseline[c.Intent] = true
		}
	}
	for _, in := range rs.Intents {
		c, ok, _ := lease.FromIntent(in)
		if !ok {
			continue
		}
		base := decide.IsBaseline(in)
		add(c, base)
		if t, ok := links[in.Object.Path.Path]; ok && in.Object.Type == policy.ObjFile {
			at := in
			at.Object.Path.Path = t
			if c, ok, _ := lease.FromIntent(at); ok {
				c.Intent = in.String() // the intent as declared
				add(c, base)
			}
		}
	}
	return claims, baseline
}

// leasing is a session's hold on its leases, from their grant to their
// release: the heartbeat, the watch for their revocation, and what the
// verification log says of them.
type leasing struct {
	store    lease.Store
	holder   lease.Holder
	borrowed bool      // holder is Options.LeaseHolder's: its owner releases
	granted  time.Time // when the leases were granted
	held     []lease.Lease
	baseline map[string]bool
	wait     *vlog.LeaseWait
	log      *slog.Logger

	mu    sync.Mutex
	ended map[string]lease.State // held leases that ended before the session did
	stop  func()
	// onStall, when set, is told when the leases stop being renewable
	// (the store unreachable: true) and when they are renewed again or
	// the session ends (false); it says whether it froze the agent.
	onStall func(stalled bool) (frozen bool)
	stalls  []vlog.LeaseStall // the last one open while stalled (To zero)
	// killEarly (strict mode): a stall a third of the TTL after the last
	// renewal ends the session while its leases still hold, so that its rollback can
	// restore what they cover (rollBack's ownScopes).
	killEarly bool
	// notify is Options.LeaseStall.
	notify func(vlog.LeaseStall)
	// renewed is when the last heartbeat the store answered was sent:
	// the leases hold at least until renewed + TTL.
	renewed time.Time
}

// leaseTenant is the tenant of a session's leases: the uid klock runs as
// (klockd names its client's).
func leaseTenant(o Options) string {
	if o.LeaseTenant != "" {
		return o.LeaseTenant
	}
	return fmt.Sprintf("uid:%d", os.Getuid())
}

// acquireLeases takes every lease rs claims for session id, waiting up to
// o.LeaseWait (progress on log), or fails with a *LeaseConflictError. A
// ruleset that leases nothing takes none (nil, nil).
func acquireLeases(ctx context.Context, o Options, rs *policy.Ruleset, id string, log *slog.Logger) (*leasing, error) {
	claims, baseline := leaseClaims(rs)
	if len(claims) == 0 {
		return nil, nil
	}
	store := o.Leases
	if store == nil {
		var err error
		if store, err = openHostLeases(); err != nil {
			return nil, fmt.Errorf("%w (sessions on this host could not see each other's leases)", err)
		}
	}
	agent := o.Manifest.Agent.ID
	if agent == "" {
		agent = "(unnamed)"
	}
	holder := lease.Holder{Tenant: leaseTenant(o), Agent: agent, Session: id, Group: o.LeaseGroup, Lead: o.LeaseGroup != ""}
	if o.LeaseHolder != nil {
		holder = *o.LeaseHolder
	}
	req := lease.Request{Holder: holder, Claims: claims, TTL: o.LeaseTTL, Grace: o.LeaseGrace}
	var (
		wait    vlog.LeaseWait
		said    string
		saidAt  time.Time
		started = time.Now()
	)
	onRetry := func(d lease.Decision, next time.Duration) {
		wait.Attempts++
		if d.Outcome == lease.Wait {
			wait.Waits++
		} else {
			wait.Deaths++
		}
		for _, c := range d.Conflicts {
			h := vlog.LeaseHolder{Session: c.Held.Holder.Session, Agent: c.Held.Holder.Agent,
				Lease: c.Held.Predicate.String() + " " + c.Held.Object, Intent: c.Claim.Intent}
			if !slices.Contains(wait.Behind, h) {
				wait.Behind = append(wait.Behind, h)
			}
		}
		if len(d.Conflicts) == 0 {
			return
		}
		// One line when whom it waits for changes, and every few seconds
		// while it does not: a WAIT is polled every 50 ms.
		c := d.Conflicts[0].Held
		on := ""
		if c.Host != "" {
			on = " on host " + c.Host
		}
		now := fmt.Sprintf("waiting for session %s (agent %s)%s holding %s %s", c.Holder.Session, c.Holder.Agent, on, c.Predicate, c.Object)
		if now != said || time.Since(saidAt) >= 5*time.Second {
			said, saidAt = now, time.Now()
			log.Info(fmt.Sprintf("%s; retry in %s", now, next.Round(time.Millisecond)),
				"conflicts", len(d.Conflicts), "waited", time.Since(started).Round(time.Millisecond), "left", (o.LeaseWait - time.Since(started)).Round(time.Second))
		}
	}
	d, err := lease.AcquireWait(ctx, store, req, lease.WaitOptions{For: o.LeaseWait, OnRetry: onRetry})
	waited := time.Since(started)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("%w: ended while waiting for the manifest's leases (%v) after %s", ErrSetup, context.Cause(ctx), waited.Round(time.Millisecond))
	case err != nil:
		return nil, fmt.Errorf("%w: acquire the manifest's leases: %v", ErrSetup, err)
	case d.Outcome != lease.Granted:
		return nil, &LeaseConflictError{Decision: d, Waited: waited, Wait: o.LeaseWait}
	}
	// When they were granted, by the store's clock (its leases' times are
	// compared with it).
	granted := time.Now()
	held := d.Leases()
	if len(held) > 0 && !held[0].AcquiredAt.IsZero() {
		granted = held[0].AcquiredAt
	}
	l := &leasing{store: store, holder: holder, borrowed: o.LeaseHolder != nil, granted: granted, held: held, baseline: baseline, log: log, ended: map[string]lease.State{}, renewed: granted}
	if wait.Attempts > 0 {
		wait.Attempts++ // the one granted
		wait.WaitedMS = waited.Milliseconds()
		l.wait = &wait
	}
	return l, nil
}

// age is the session's Wait-Die age (its first attempt), which its
// amendments keep; zero when it holds no lease.
func (l *leasing) age() time.Time {
	if len(l.held) == 0 {
		return time.Time{}
	}
	return l.held[0].Age
}

// ttl is the lifetime the store gave the leases (all share it).
func (l *leasing) ttl() time.Duration {
	if len(l.held) == 0 || l.held[0].TTL <= 0 {
		return lease.DefaultTTL
	}
	return l.held[0].TTL
}

// storeWatcher is a store that publishes its events (lease.Table does):
// a revocation is then seen at once, not at the next heartbeat.
type storeWatcher interface {
	Subscribe(buf int) (<-chan lease.Event, func())
}

// keepAlive heartbeats the leases every TTL/3 until release, and calls
// lost once, with the reason, when they are no longer all held (revoked:
// klock kill, klock leases revoke, the lease API; or expired: klock did
// not heartbeat for TTL + grace). A session must not run on without them:
// another session may then be granted what it changes.
func (l *leasing) keepAlive(lost func(error)) {
	ctx, cancel := context.WithCancel(context.Background())
	var events <-chan lease.Event
	unsub := func() {}
	if w, ok := l.store.(storeWatcher); ok {
		events, unsub = w.Subscribe(256)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		every := max(l.ttl()/3, time.Millisecond)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					events = nil
					continue
				}
				if ev.Type != lease.LeaseFreed || ev.Lease.Holder != l.holder || ev.Lease.State == lease.Released {
					continue
				}
			case <-t.C:
				// A heartbeat waits half the time to the next: a store
				// that does not answer by then is stalled, known by
				// TTL/2 after the last renewal at the latest.
				hctx, hcancel := context.WithTimeout(ctx, every/2)
				sent := time.Now()
				_, err := l.store.Heartbeat(hctx, l.holder)
				hcancel()
				if errors.Is(err, lease.ErrLost) {
					// A fleet store lost etcd past the TTL: the leases
					// may be granted elsewhere now, and List cannot say.
					l.stalled(false, "lost", err)
					lost(err)
					return
				}
				if errors.Is(err, lease.ErrUnreachable) {
					if ctx.Err() == nil {
						l.stalled(true, "", err)
					}
					if since := l.renewedAt(); l.killEarly && time.Since(since) >= l.ttl()/3 {
						l.stalled(false, "lost", nil)
						lost(fmt.Errorf("%w: the fleet's lease store has not answered since %s (%v); the session is ended early in its leases' TTL (%s), while they are still its own, so that its rollback restores what they cover before another host may be granted it",
							lease.ErrLost, since.UTC().Format(time.RFC3339), err, l.ttl()))
						return
					}
					continue
				}
				if err != nil && !errors.Is(err, lease.ErrGone) {
					if ctx.Err() == nil {
						l.log.Warn("lease heartbeat failed: retrying (the leases hold until their TTL and grace run out)", "error", err)
					}
					continue
				}
				if err == nil {
					l.mu.Lock()
					l.renewed = sent
					l.mu.Unlock()
					l.stalled(false, "renewed", nil)
				}
			}
			if err := l.check(ctx); err != nil {
				lost(err)
				return
			}
		}
	}()
	l.stop = sync.OnceFunc(func() {
		cancel()
		<-done
		unsub()
		l.stalled(false, "ended", nil)
	})
}

// stalled records the start (on) or the end of a time the leases could
// not be renewed, and tells onStall: a permissive session's agent is
// frozen from the first heartbeat the store does not answer until one it
// does, since its leases may run out and be granted to another host.
func (l *leasing) stalled(on bool, outcome string, err error) {
	l.mu.Lock()
	open := len(l.stalls) > 0 && l.stalls[len(l.stalls)-1].To.IsZero()
	if on == open {
		l.mu.Unlock()
		return
	}
	if on {
		l.stalls = append(l.stalls, vlog.LeaseStall{From: time.Now(), Why: err.Error()})
	}
	l.mu.Unlock()
	frozen := false
	if l.onStall != nil {
		frozen = l.onStall(on)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := &l.stalls[len(l.stalls)-1]
	if on {
		st.Frozen = frozen
		l.log.Warn("the lease store does not answer: the leases hold until their TTL runs out without a renewal", "frozen", frozen, "error", err)
	} else {
		st.To, st.Outcome = time.Now(), outcome
		l.log.Info("the lease store's stall ended", "outcome", outcome, "after", st.Length().Round(time.Millisecond))
	}
	if l.notify != nil {
		l.notify(*st) // under l.mu: in order; the listener never calls back
	}
}

// renewedAt is when the last answered heartbeat was sent.
func (l *leasing) renewedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

// stillHeld: the leases cannot have run out yet (a store that does not
// answer cannot have renewed them, nor given them to anyone before their
// TTL from the last renewal; a tenth of it is kept as a margin for the
// clocks and the network).
func (l *leasing) stillHeld() bool {
	return l != nil && time.Now().Before(l.heldUntil())
}

// stalledNow: the store did not answer the last heartbeat.
func (l *leasing) stalledNow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.stalls) > 0 && (l.stalls[len(l.stalls)-1].To.IsZero() || l.stalls[len(l.stalls)-1].Outcome == "lost")
}

// heldUntil is when the leases may run out at the earliest, with the
// margin of stillHeld.
func (l *leasing) heldUntil() time.Time { return l.renewedAt().Add(l.ttl() * 9 / 10) }

// ownScopes are the FILE trees and files this session's own leases cover.
func (l *leasing) ownScopes() []snapshot.Scope {
	var out []snapshot.Scope
	for _, h := range l.held {
		if h.Resource.Type != policy.ObjFile || !policy.Changing.Has(h.Predicate) {
			continue
		}
		switch h.Resource.Path.Match {
		case policy.MatchSubtree:
			out = append(out, snapshot.Scope{Path: h.Resource.Path.Path, Tree: true})
		case policy.MatchExact:
			out = append(out, snapshot.Scope{Path: h.Resource.Path.Path})
		}
	}
	return out
}

// stallsLog is what the verification log says of the stalls.
func (l *leasing) stallsLog() []vlog.LeaseStall {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]vlog.LeaseStall(nil), l.stalls...)
}

// check returns an error naming the held leases that ended (and how),
// nil while every one is held.
func (l *leasing) check(ctx context.Context) error {
	live, err := l.store.List(ctx, lease.Filter{Tenant: l.holder.Tenant, Session: l.holder.Session, EndedSince: l.granted})
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("cannot list the session's leases", "error", err)
		}
		return nil
	}
	state := map[string]lease.State{}
	for _, x := range live {
		if x.Holder == l.holder {
			state[x.ID] = x.State
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var gone []lease.Lease
	for _, h := range l.held {
		s, ok := state[h.ID]
		if ok && s == lease.Active {
			continue
		}
		if !ok {
			s = lease.Expired // forgotten by the store: not held
		}
		l.ended[h.ID] = s
		h.State = s
		gone = append(gone, h)
	}
	if len(gone) == 0 {
		return nil
	}
	how := "revoked (klock kill, klock leases revoke, or an operator through the lease API)"
	if gone[0].State == lease.Expired {
		how = fmt.Sprintf("expired (not heartbeated for their TTL %s and grace %s: klock was stopped, or could not reach the lease store)", gone[0].TTL, gone[0].Grace)
	}
	return fmt.Errorf("leases revoked: %d of the session's %d leases were %s, %s %s first; it does not run on unprotected, since another session may now be granted what it changes",
		len(gone), len(l.held), how, gone[0].Predicate, gone[0].Object)
}

// release stops the heartbeat and frees every lease still held.
func (l *leasing) release() {
	if l.stop != nil {
		l.stop()
	}
	if l.borrowed {
		return // the holder's owner releases them (a tool call's, when it ends)
	}
	if _, err := l.store.Release(context.Background(), l.holder); err != nil {
		l.log.Warn("release the session's leases (they expire after their TTL and grace)", "error", err)
	}
}

// vlog is what the verification log says of the leases.
func (l *leasing) vlog() ([]vlog.HeldLease, *vlog.LeaseWait) {
	if l == nil {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]vlog.HeldLease, 0, len(l.held))
	for _, h := range l.held {
		e := ""
		if s, ok := l.ended[h.ID]; ok {
			e = s.String()
		}
		out = append(out, vlog.HeldLease{ID: h.ID, Lease: h.Predicate.String() + " " + h.Object, Baseline: l.baseline[h.Intent], Acquired: h.AcquiredAt, End: e})
	}
	return out, l.wait
}

// othersChanging lists the leases of other holders that let them change
// files (MUTATES, DELETES, RENAMES, PROVIDES on FILE) and were held at
// some time since this session's were granted: live now, or ended since,
// as far as the store remembers.
func (l *leasing) othersChanging(ctx context.Context) ([]lease.Lease, error) {
	all, err := l.store.List(ctx, lease.Filter{EndedSince: l.granted})
	if err != nil {
		return nil, err
	}
	var out []lease.Lease
	for _, x := range all {
		if x.Holder.SameParty(l.holder) || !policy.Changing.Has(x.Predicate) {
			continue
		}
		if x.Resource.Type == 0 { // a store that kept the object's text only
			r, err := lease.ParseResource(x.Object)
			if err != nil {
				continue
			}
			x.Resource = r
		}
		if x.Resource.Type == policy.ObjFile {
			out = append(out, x)
		}
	}
	return out, nil
}

// leaveRegions are the regions a rollback of this session leaves: each
// other holder's changing FILE lease held during it (othersChanging).
func (l *leasing) leaveRegions(ctx context.Context) ([]snapshot.Region, error) {
	if l == nil {
		return nil, nil
	}
	others, err := l.othersChanging(ctx)
	if err != nil {
		return nil, err
	}
	return LeaseRegions(others), nil
}

// LeaseRegions are the snapshot regions of leases (FILE ones), each saying
// whose it is and since when, for a rollback to leave.
func LeaseRegions(ls []lease.Lease) []snapshot.Region {
	var out []snapshot.Region
	for _, x := range ls {
		if x.Resource.Type != policy.ObjFile {
			continue
		}
		when := "holds"
		if x.State != lease.Active {
			when = fmt.Sprintf("held until %s (%s)", x.EndedAt.UTC().Format(time.RFC3339), x.State)
		}
		out = append(out, snapshot.Region{Pattern: x.Resource.Path,
			Why: fmt.Sprintf("session %s (agent %s) %s %s %s, lease %s", x.Holder.Session, x.Holder.Agent, when, x.Predicate, x.Object, x.ID)})
	}
	return out
}

// excludeFromBackup are the trees other holders' changing leases cover
// when this session's were granted: the backup records them apart, best
// effort (snapshot.Options.Others: their files change while it is taken,
// and a rollback leaves them unless this session's agent changed a file
// there, which it then puts back).
func (l *leasing) excludeFromBackup(ctx context.Context) []string {
	if l == nil {
		return nil
	}
	others, err := l.othersChanging(ctx)
	if err != nil {
		return nil // backed up: the rollback still leaves them
	}
	var out []string
	for _, x := range others {
		if x.State == lease.Active && x.Resource.Path.Match == policy.MatchSubtree && x.Resource.Path.Path != "/" {
			out = append(out, x.Resource.Path.Path)
		}
	}
	return out
}
