package fleetbudget

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/guard/budget"
)

// giveBack returns g's unused block to the fleet: this member's
// allocation becomes its usage. The view drops before the write is sent,
// so an unanswered write can only leave etcd holding more for this member
// than it spends.
func (l *Ledger) giveBack(ctx context.Context, g *grant) error {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	_, err := cas(ctx, l.cli, g.etcdKey, func(r *Record) error {
		if err := l.checkLimits(r, g); err != nil {
			return err
		}
		g.mu.Lock()
		g.allocInv, g.allocUnits = g.usedInv, g.usedUnits
		m := Member{Invocations: g.usedInv, Units: g.usedUnits, UsedInvocations: g.usedInv, UsedUnits: g.usedUnits,
			At: l.cfg.now().UTC().Format(time.RFC3339Nano)}
		g.mu.Unlock()
		r.Members[l.cfg.member] = &m
		return nil
	})
	if err != nil {
		return fmt.Errorf("return the unused block of %s: %w", g.key, l.updateErr(ctx, g, err))
	}
	g.mu.Lock()
	g.synced = true
	g.mu.Unlock()
	return nil
}

// idle reports whether g has an unused block and no Reserve for d.
func (g *grant) idle(now time.Time, d time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.synced && (g.allocInv > g.usedInv || g.allocUnits > g.usedUnits) && now.Sub(g.lastUse) >= d
}

func (l *Ledger) shared() []*grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*grant
	for _, g := range l.grants {
		if g.shared {
			out = append(out, g)
		}
	}
	return out
}

// idler returns idle grants' blocks, so that a host that stopped calling
// does not keep what other hosts could spend.
func (l *Ledger) idler() {
	defer l.wg.Done()
	t := time.NewTicker(max(l.cfg.idle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		for _, g := range l.shared() {
			if g.idle(l.cfg.now(), l.cfg.idle) {
				if err := l.giveBack(context.Background(), g); err != nil {
					slog.Warn("klock: fleet budget: keeping the idle block until etcd answers", "err", err)
				}
			}
		}
	}
}

// Close returns every unused block to the fleet and records this
// member's final usage (what klock receipts verify --fleet compares). It
// closes neither the store nor the client. A block etcd did not take back
// stays this member's, resumed when it starts again.
func (l *Ledger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	l.wg.Wait()
	var errs []error
	for _, g := range l.shared() {
		errs = append(errs, l.giveBack(context.Background(), g))
	}
	return errors.Join(errs...)
}

// Fleet reads grant k's record from etcd.
func (l *Ledger) Fleet(ctx context.Context, k budget.Key) (*Record, error) {
	all, err := ReadLedger(ctx, l.cli, l.cfg.prefix)
	if err != nil {
		return nil, err
	}
	return all[k], nil
}

// ReadLedger reads every shared grant's record under prefix.
func ReadLedger(ctx context.Context, cli *clientv3.Client, prefix string) (map[budget.Key]*Record, error) {
	from := strings.TrimRight(prefix, "/") + "/budget/"
	resp, err := cli.Get(ctx, from, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ErrUnavailable, from, err)
	}
	out := map[budget.Key]*Record{}
	for _, kv := range resp.Kvs {
		k, ok := parseKey(prefix, string(kv.Key))
		if !ok {
			continue
		}
		r := &Record{}
		if err := json.Unmarshal(kv.Value, r); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, kv.Key, err)
		}
		out[k] = r
	}
	return out, nil
}

func paramHash(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	s := sha256.Sum256(p)
	return "sha256:" + hex.EncodeToString(s[:])
}
