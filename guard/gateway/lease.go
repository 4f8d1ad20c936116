package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// ReasonLeaseConflict is the reason of a call refused because another
// holder (an agent session, another call) holds a lease on what the tool
// touches: a retryable tool_restricted error.
const ReasonLeaseConflict = "lease_conflict"

// leasing is WithLeases: the store a call's leases are taken from, and how.
type leasing struct {
	store   lease.Store
	workdir string        // the opaque tools' scope
	wait    time.Duration // how long a call waits for its leases
	holder  func(call *check.Call, callID string) lease.Holder
	agent   string
}

// LeaseOption configures WithLeases.
type LeaseOption func(*leasing)

// LeaseWait makes a call whose leases another holder has wait for them up
// to d (Wait-Die, keeping its age: lease.AcquireWait) before it is
// refused; 0 (the default) refuses at once. A short wait lets calls of
// one gateway that touch the same files run one after the other instead
// of failing.
func LeaseWait(d time.Duration) LeaseOption { return func(l *leasing) { l.wait = d } }

// LeaseWorkdir is the directory an opaque tool (no touches) is assumed to
// change, whole (default: the manifest's workdir, else the gateway's
// working directory).
func LeaseWorkdir(dir string) LeaseOption { return func(l *leasing) { l.workdir = dir } }

// LeaseHolder names who holds a call's leases (default: the manifest's
// agent, session "tool:<tool>:<call id>", tenant the gateway's uid, group
// "run:<run id>": every call is a holder of its own, so it conflicts with
// another call changing the same files and with an agent session holding
// that scope, except the session of its own run, which klock run
// --gateway-run joined to the group: the call acts for it).
func LeaseHolder(f func(call *check.Call, callID string) lease.Holder) LeaseOption {
	return func(l *leasing) { l.holder = f }
}

// WithLeases makes every call hold, from before it is dispatched until it
// ends (returned, failed, timed out or panicked), KLIS leases in store on
// what its tool touches (KLIS-6 §5): the contract's touches, or, for a
// tool that declares none, the broader MUTATES FILE:<workdir>/** (an
// opaque tool may change anything there; a READ tool's contract says it
// changes nothing: CONSUMES). A tool that declares touches: [] takes
// none. A call whose leases are not granted is refused before anything is
// reserved or dispatched, with a retryable tool_restricted error (reason
// lease_conflict) naming the holder; a store that cannot answer refuses
// it too (tool_internal_error, reason lease_store). The gateway's own
// calls (must_belong_to lookups) lease as any call; the compensations of
// a killed run's rollback do not (the killed session may still hold
// what they undo).
func WithLeases(store lease.Store, opts ...LeaseOption) Option {
	return func(g *Gateway) {
		l := &leasing{store: store}
		for _, o := range opts {
			o(l)
		}
		g.leases = l
	}
}

// setup fills what WithLeases left to the manifest.
func (l *leasing) setup(m *policy.Manifest) {
	l.agent = m.Agent.ID
	if l.workdir == "" {
		l.workdir = m.Workdir
	}
	if l.workdir == "" {
		l.workdir, _ = os.Getwd()
	}
	if l.workdir == "" {
		l.workdir = "/"
	}
	l.workdir = filepath.Clean(l.workdir)
	if l.holder == nil {
		tenant := fmt.Sprintf("uid:%d", os.Geteuid())
		l.holder = func(call *check.Call, callID string) lease.Holder {
			h := lease.Holder{Tenant: tenant, Agent: l.agent, Session: "tool:" + call.Tool + ":" + callID}
			if call.RunID != "" {
				// The session of this run (klock run --gateway-run, same
				// tenant) is the party the call acts for.
				h.Group = "run:" + call.RunID
			}
			return h
		}
	}
}

// intents are what a call of t leases.
func (l *leasing) intents(t *policy.Tool) []policy.Intent {
	if t != nil && t.Touches != nil {
		return t.Touches
	}
	p := policy.Mutates
	if t != nil && t.SideEffects == policy.SideEffectRead {
		p = policy.Consumes
	}
	return []policy.Intent{{Predicate: p, Origin: "tool", Object: policy.Object{Type: policy.ObjFile,
		Path: policy.PathPattern{Path: l.workdir, Match: policy.MatchSubtree}}}}
}

// heartbeatEvery renews a call's leases while it runs: well inside their
// TTL, so a call longer than the TTL keeps them, and a gateway that died
// frees them after TTL and grace.
const heartbeatEvery = lease.DefaultTTL / 3

// acquire takes the call's leases. It returns the function that releases
// them (call it when the call ends, whatever the outcome), or the refusal.
func (l *leasing) acquire(ctx context.Context, call *check.Call, callID string, t *policy.Tool) (func(), []lease.Lease, lease.Holder, *toolerr.Error) {
	var claims []lease.Claim
	for _, in := range l.intents(t) {
		if c, ok, _ := lease.FromIntent(in); ok {
			claims = append(claims, c)
		}
	}
	if len(claims) == 0 {
		return func() {}, nil, lease.Holder{}, nil
	}
	h := l.holder(call, callID)
	d, err := lease.AcquireWait(ctx, l.store, lease.Request{Holder: h, Claims: claims}, lease.WaitOptions{For: l.wait})
	if err != nil {
		e := toolerr.New(toolerr.InternalError, "lease_store", "%s was not dispatched: its leases could not be decided (%v)", call.Tool, err).WithRetry(true)
		e.Check = "lease"
		return nil, nil, lease.Holder{}, e
	}
	if d.Outcome != lease.Granted {
		return nil, nil, lease.Holder{}, conflictErr(call.Tool, d)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(heartbeatEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _ = l.store.Heartbeat(context.WithoutCancel(ctx), h)
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		// Every lease of the call's holder: its own, and those a plugin
		// session took as the call's.
		_, _ = l.store.Release(context.WithoutCancel(ctx), h)
	}, d.Leases(), h, nil
}

// ReasonLeaseLost is the reason of a call refused at dispatch because its
// leases no longer hold: its gateway was paused (or cut off from a shared
// store) past their TTL, and another holder may have been granted what
// the tool touches since.
const ReasonLeaseLost = "lease_lost"

// fenced checks, just before dispatch, that every fenced lease of the call
// still holds (lease.Fencer; a host-local store has no fencing tokens and
// needs none: its leases cannot be granted elsewhere while this process
// lives). This is the fencing Kleppmann describes for distributed locks:
// a holder resumed after a pause must not act on a grant it lost.
func (l *leasing) fenced(ctx context.Context, tool string, held []lease.Lease) *toolerr.Error {
	f, ok := l.store.(lease.Fencer)
	if !ok {
		return nil
	}
	for _, h := range held {
		if h.Fence == 0 {
			continue
		}
		if err := f.CheckFence(ctx, h); err != nil {
			state := "no longer holds"
			if errors.Is(err, lease.ErrUnreachable) {
				state = "cannot be confirmed"
			}
			e := toolerr.New(toolerr.Restricted, ReasonLeaseLost, "%s was not dispatched: its lease %s on %s (fencing token %d) %s (%v); another holder may have been granted it. Retry: the call takes its leases again",
				tool, h.ID, h.Object, h.Fence, state, err).WithRetry(true)
			e.Check = "lease"
			return e
		}
	}
	return nil
}

// conflictErr is the refusal of a call whose leases were not granted:
// which of its intents conflicts with whose lease.
func conflictErr(tool string, d lease.Decision) *toolerr.Error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s was not dispatched: what it touches is held by another", tool)
	if len(d.Conflicts) > 0 {
		c := d.Conflicts[0]
		fmt.Fprintf(&b, ": its %s conflicts with %s (lease %s) held by session %s of agent %s",
			c.Claim.Intent, c.Held.Predicate.String()+" "+c.Held.Object, c.Held.ID, c.Held.Holder.Session, c.Held.Holder.Agent)
		if n := len(d.Conflicts) - 1; n > 0 {
			fmt.Fprintf(&b, " (and %d more)", n)
		}
	}
	b.WriteString("; retry when it is released")
	if d.WaitTime > 0 {
		fmt.Fprintf(&b, " (if its holder stops renewing it, it expires in %s)", d.WaitTime.Round(time.Second))
	}
	e := toolerr.New(toolerr.Restricted, ReasonLeaseConflict, "%s", b.String()).WithRetry(true)
	e.Check = "lease"
	return e
}

// leaseEvidence names what the call holds leases on.
func leaseEvidence(held []lease.Lease) check.Evidence {
	if len(held) == 0 {
		return check.Evidence{GuardName: "lease", Verdict: true, Details: "the tool touches nothing here: no lease needed"}
	}
	objs := make([]string, 0, len(held))
	for _, l := range held {
		objs = append(objs, string(l.Predicate)+" "+l.Object)
	}
	return check.Evidence{GuardName: "lease", Verdict: true, Details: "held for the call: " + strings.Join(objs, ", ")}
}
