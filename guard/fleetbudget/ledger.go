package fleetbudget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/receipt"
)

// Ledger is a local budget store whose root grants are shared fleet-wide.
// It is safe for concurrent use.
type Ledger struct {
	store  *budget.Store
	cli    *clientv3.Client
	cfg    config
	mu     sync.Mutex
	grants map[budget.Key]*grant
	stop   chan struct{}
	wg     sync.WaitGroup
	closed bool
}

type config struct {
	prefix, member string
	block          uint64
	idle, timeout  time.Duration
	now            func() time.Time
}

// Option configures New.
type Option func(*config)

// WithBlock caps a block at n invocations (and n worst-case calls' worth
// of money). Default 1024.
func WithBlock(n uint64) Option { return func(c *config) { c.block = max(n, 1) } }

// WithIdle returns a grant's unused block to the fleet after d without a
// Reserve of it (default 10s; 0 keeps it until Close).
func WithIdle(d time.Duration) Option { return func(c *config) { c.idle = d } }

// WithTimeout bounds how long a call waits for etcd when it needs a new
// block (default 5s: longer than an etcd leader election).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

var _ budget.Authorizer = (*Ledger)(nil)

// New decorates store. prefix is the fleet's key prefix; member names this
// ledger in the fleet, and must be unique to it and stable across its
// restarts (cmd/klock uses host:receipts-directory).
func New(store *budget.Store, cli *clientv3.Client, prefix, member string, opts ...Option) *Ledger {
	cfg := config{prefix: prefix, member: member, block: 1024, idle: 10 * time.Second, timeout: 5 * time.Second, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	l := &Ledger{store: store, cli: cli, cfg: cfg, grants: map[budget.Key]*grant{}, stop: make(chan struct{})}
	if cfg.idle > 0 {
		l.wg.Add(1)
		go l.idler()
	}
	return l
}

// grant is one shared grant: this member's allocation and usage.
type grant struct {
	key          budget.Key
	limits       budget.Limits
	tool, server string
	etcdKey      string
	shared       bool // has a limit to share

	mu                   sync.Mutex
	allocInv, allocUnits uint64 // committed in etcd (a lower bound after an unanswered write)
	usedInv, usedUnits   uint64 // the local ledger's counters
	synced               bool   // alloc was read from etcd by this process
	lastUse              time.Time

	syncMu sync.Mutex // one etcd update of this grant at a time
	// The last take that failed, so that the callers queued behind it
	// share its answer instead of asking etcd one after another (gen
	// counts the takes; guarded by mu).
	gen      uint64
	failed   error
	failedAt [2]uint64 // what it needed: invocations, units
}

// fits reports whether inv invocations and units more stay within the
// allocation (g.mu held).
func (g *grant) fits(inv, units uint64) bool {
	if g.limits.MaxInvocations != 0 && g.usedInv+inv > g.allocInv {
		return false
	}
	return g.limits.Total == nil || g.usedUnits+units <= g.allocUnits
}

func (g *grant) give(inv, units uint64) {
	g.mu.Lock()
	g.usedInv -= min(inv, g.usedInv)
	g.usedUnits -= min(units, g.usedUnits)
	g.mu.Unlock()
}

// Define defines the grant locally and joins its fleet allocation. With
// etcd unreachable the grant is defined and its calls wait for etcd
// (refused with ErrUnavailable) until a block can be taken.
func (l *Ledger) Define(ctx context.Context, d budget.Grant) error {
	if d.Parent != nil {
		return fmt.Errorf("%w: %s is delegated from %s: a fleet shares root grants only", budget.ErrBadRequest, d.Key, d.Parent)
	}
	if err := l.store.Define(ctx, d); err != nil {
		return err
	}
	u, err := l.store.Usage(ctx, d.Key)
	if err != nil {
		return err
	}
	g := &grant{key: d.Key, limits: d.Limits, tool: d.Tool, server: d.Server, etcdKey: GrantKey(l.cfg.prefix, d.Key),
		shared: d.Limits.MaxInvocations != 0 || d.Limits.Total != nil, usedInv: u.Invocations, usedUnits: u.Charged.Units, lastUse: l.cfg.now()}
	l.mu.Lock()
	if old := l.grants[d.Key]; old != nil {
		l.mu.Unlock()
		return nil // defined again with the same limits (the store checked)
	}
	l.grants[d.Key] = g
	l.mu.Unlock()
	if !g.shared {
		return nil
	}
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	err = l.update(ctx, g, 0, 0)
	if errors.Is(err, ErrUnavailable) {
		slog.Warn("klock: fleet budget: etcd unreachable; calls of the grant are refused until a block can be taken", "grant", d.Key, "err", err)
		return nil
	}
	if err != nil { // not shared: its calls would find no grant
		l.mu.Lock()
		delete(l.grants, d.Key)
		l.mu.Unlock()
	}
	return err
}

func (l *Ledger) grant(k budget.Key) *grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grants[k]
}

// Reserve pre-charges a call: from this member's block, taking a new
// block from the fleet first when the block cannot cover it.
func (l *Ledger) Reserve(ctx context.Context, req budget.Request) (budget.Hold, error) {
	g := l.grant(req.Key)
	if g == nil {
		// The local store may know it from an earlier run: charging it
		// there alone would spend outside the fleet's grant.
		return budget.Hold{}, fmt.Errorf("%w: %s (define it through the fleet budget first)", budget.ErrUnknownGrant, req.Key)
	}
	if !g.shared {
		return l.store.Reserve(ctx, req)
	}
	c := g.cost(req)
	if err := l.acquire(ctx, g, 1, c, req); err != nil {
		return budget.Hold{}, err
	}
	h, err := l.store.Reserve(ctx, req)
	if err != nil {
		if !errors.Is(err, budget.ErrLedger) {
			g.give(1, c) // refused: nothing was charged
		}
		return h, err
	}
	switch r := h.Reserved.Units; {
	case r < c:
		g.give(0, c-r)
	case r > c:
		// A cost in another currency: known once the store converted it.
		if err := l.acquire(ctx, g, 0, r-c, req); err != nil {
			if _, rerr := l.store.Release(ctx, h.ID, "fleet budget: "+err.Error(), "budget"); rerr == nil {
				g.give(1, c)
			}
			return budget.Hold{}, err
		}
	}
	return h, nil
}

// cost is the call's worst case in the grant's currency when it is known
// before the store decides (0 for a cost in another currency).
func (g *grant) cost(req budget.Request) uint64 {
	switch req.Cost.Currency {
	case "":
		if p := g.limits.PerInvocation; p != nil {
			return *p
		}
		return 0
	case g.limits.Currency:
		return req.Cost.Units
	}
	return 0
}

// acquire takes inv and units from the block, refilling it from the fleet
// when it cannot cover them.
func (l *Ledger) acquire(ctx context.Context, g *grant, inv, units uint64, req budget.Request) error {
	for {
		gen, ok := g.take(inv, units, l.cfg.now())
		if ok {
			return nil
		}
		g.syncMu.Lock()
		if _, ok := g.take(inv, units, l.cfg.now()); ok { // another caller refilled it
			g.syncMu.Unlock()
			return nil
		}
		err := g.sameAnswer(gen, inv, units)
		if err == nil {
			err = l.update(ctx, g, inv, units)
			g.answered(err, inv, units)
		}
		g.syncMu.Unlock()
		if err != nil {
			return l.refuse(ctx, g, req, units, err)
		}
	}
}

// sameAnswer is the refusal of a take that ran while this caller waited
// for it and needed no more than this caller does (nil if there was none).
func (g *grant) sameAnswer(gen, inv, units uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gen != gen && g.failed != nil && inv >= g.failedAt[0] && units >= g.failedAt[1] {
		return g.failed
	}
	return nil
}

func (g *grant) answered(err error, inv, units uint64) {
	g.mu.Lock()
	g.gen++
	g.failed, g.failedAt = err, [2]uint64{inv, units}
	g.mu.Unlock()
}

// take consumes inv and units from the block if it covers them; gen is
// the take count it saw.
func (g *grant) take(inv, units uint64, now time.Time) (uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastUse = now
	if !g.synced || !g.fits(inv, units) {
		return g.gen, false
	}
	g.usedInv += inv
	g.usedUnits += units
	return g.gen, true
}

// Reconcile settles a hold locally and credits the difference back into
// this member's block.
func (l *Ledger) Reconcile(ctx context.Context, holdID string, s budget.Settle) (budget.Settlement, error) {
	st, err := l.store.Reconcile(ctx, holdID, s)
	if err == nil {
		if g := l.grantOf(st.Receipt); g != nil {
			g.mu.Lock()
			g.usedUnits = g.usedUnits + st.Overrun - min(st.Credit, g.usedUnits+st.Overrun)
			g.mu.Unlock()
		}
	}
	return st, err
}

// Release reverses a hold and gives its invocation and money back to
// this member's block.
func (l *Ledger) Release(ctx context.Context, holdID, reason, guard string) (*receipt.Receipt, error) {
	rc, err := l.store.Release(ctx, holdID, reason, guard)
	if err == nil {
		if g := l.grantOf(rc); g != nil {
			g.give(1, uint64(rc.Metadata.Financial.LedgerCredit))
		}
	}
	return rc, err
}

// Record passes a receipt that moves no money to the local chain.
func (l *Ledger) Record(ctx context.Context, r *receipt.Receipt) error { return l.store.Record(ctx, r) }

func (l *Ledger) grantOf(rc *receipt.Receipt) *grant {
	if rc == nil || rc.Metadata.Financial == nil {
		return nil
	}
	g := l.grant(budget.Key{Capability: rc.CapabilityID, Grant: rc.Metadata.Financial.GrantIndex})
	if g == nil || !g.shared {
		return nil
	}
	return g
}
