package etcdstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
)

// poolMax bounds the idle etcd leases a store keeps alive.
const poolMax = 64

// holderLease is the etcd lease h's keys are bound to: taken on its first
// grant from the pool (an etcd lease of the same TTL a released holder
// left), else granted with the request's TTL, and kept alive until
// released or lost.
func (s *Store) holderLease(ctx context.Context, req *lease.Request) (*held, error) {
	ttl := req.TTL
	if ttl <= 0 {
		ttl = lease.DefaultTTL
	}
	ttl = min(ttl, lease.MaxTTL)
	secs := max(int64((ttl+time.Second-1)/time.Second), 1)
	ttl = time.Duration(secs) * time.Second
	s.mu.Lock()
	if h := s.sess[req.Holder]; h != nil {
		s.mu.Unlock()
		return h, nil
	}
	if h := s.fromPool(ttl); h != nil {
		s.own(req.Holder, h)
		s.mu.Unlock()
		return h, nil
	}
	s.mu.Unlock()
	g, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return nil, s.unavailable(err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	ch, err := s.cli.KeepAlive(kctx, g.ID)
	if err != nil {
		cancel()
		return nil, s.unavailable(err)
	}
	h := &held{id: g.ID, ttl: ttl, cancel: cancel}
	go s.watchKeepAlive(h, ch, kctx)
	s.mu.Lock()
	if o := s.sess[req.Holder]; o != nil { // raced: keep the first
		s.mu.Unlock()
		cancel()
		_, _ = s.cli.Revoke(ctx, g.ID)
		return o, nil
	}
	s.own(req.Holder, h)
	s.mu.Unlock()
	return h, nil
}

// fromPool takes a live pooled etcd lease of ttl (s.mu held).
func (s *Store) fromPool(ttl time.Duration) *held {
	for i := len(s.pool) - 1; i >= 0; i-- {
		if h := s.pool[i]; h.ttl == ttl && !h.dead {
			s.pool = append(s.pool[:i], s.pool[i+1:]...)
			return h
		}
	}
	return nil
}

// own gives h to who (s.mu held).
func (s *Store) own(who lease.Holder, h *held) {
	h.owner = &who
	h.keys = map[string]bool{}
	s.sess[who] = h
	delete(s.gone, who)
}

// track records the keys a grant put for who under h; false when who
// released h meanwhile (the keys must then go: h may be pooled, and its
// next holder must not keep them alive).
func (s *Store) track(who lease.Holder, h *held, keys []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess[who] != h {
		return false
	}
	for _, k := range keys {
		h.keys[k] = true
	}
	return true
}

// watchKeepAlive drains the keep-alive responses; when the channel closes
// while the lease is still wanted (etcd unreachable past the TTL, or the
// lease revoked), its owner, if any, is lost and told on Lost.
func (s *Store) watchKeepAlive(h *held, ch <-chan *clientv3.LeaseKeepAliveResponse, ctx context.Context) {
	last := time.Now()
	for range ch {
		last = time.Now()
	}
	if ctx.Err() != nil { // released on purpose
		return
	}
	why := fmt.Sprintf("etcd (%s) has not renewed this host's etcd lease (TTL %s) since %s: the fleet may have granted its scope to another host since",
		strings.Join(s.cli.Endpoints(), ","), h.ttl, last.UTC().Format(time.RFC3339))
	s.mu.Lock()
	h.dead = true
	who := h.owner
	if who != nil && s.sess[*who] == h {
		delete(s.sess, *who)
		s.gone[*who] = why
	}
	s.mu.Unlock()
	h.cancel()
	if who == nil {
		return
	}
	select {
	case s.lost <- *who:
	default:
	}
}

// drop forgets h, an etcd lease etcd no longer has, when who held nothing
// on it yet (a grant put on it failed); false when who did hold keys on
// it: those are gone, which its keep-alive reports as lost.
func (s *Store) drop(who lease.Holder, h *held) bool {
	s.mu.Lock()
	h.dead = true
	empty := len(h.keys) == 0
	if s.sess[who] == h && empty {
		delete(s.sess, who)
	}
	s.mu.Unlock()
	if empty {
		h.cancel()
	}
	return empty
}

// forget ends who's use of h: h goes back to the pool when keep is true
// and the pool has room, else its keep-alive stops.
func (s *Store) forget(who lease.Holder, h *held, keep bool) {
	s.mu.Lock()
	if s.sess[who] == h {
		delete(s.sess, who)
	}
	pooled := keep && !h.dead && len(s.pool) < poolMax
	if pooled {
		h.owner, h.keys = nil, nil
		s.pool = append(s.pool, h)
	}
	s.mu.Unlock()
	if !pooled {
		h.cancel()
	}
}

// Heartbeat implements lease.Store: it renews h's etcd lease once (the
// background keep-alive renews it too).
func (s *Store) Heartbeat(ctx context.Context, who lease.Holder) (time.Time, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	s.mu.Lock()
	h, why := s.sess[who], s.gone[who]
	s.mu.Unlock()
	if why != "" {
		return time.Time{}, fmt.Errorf("%w: %s (%w)", lease.ErrLost, why, lease.ErrGone)
	}
	if h == nil {
		return time.Time{}, lease.ErrGone
	}
	r, err := s.cli.KeepAliveOnce(ctx, h.id)
	if err != nil {
		// Not gone yet: the background keep-alive decides, at the TTL.
		return time.Time{}, s.unavailable(err)
	}
	s.up()
	if r.TTL <= 0 {
		return time.Time{}, lease.ErrGone
	}
	return time.Now().Add(time.Duration(r.TTL) * time.Second), nil
}

// Release implements lease.Store. Releasing everything a holder of this
// store holds deletes the keys it put in one transaction, without
// reading, and pools its etcd lease; the rest reads the holder's keys
// first. The age key stays: a holder that acquires again keeps its age,
// as KLIS's requester keeps its timestamp across retries.
func (s *Store) Release(ctx context.Context, who lease.Holder, ids ...string) (int, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	s.mu.Lock()
	h := s.sess[who]
	var keys []string
	if h != nil && len(ids) == 0 {
		for k := range h.keys {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	if h != nil && len(ids) == 0 {
		n, err := s.delete(ctx, keys, lease.Released)
		if err != nil {
			return 0, err
		}
		s.forget(who, h, true)
		return n, nil
	}
	return s.releaseRead(ctx, who, h, ids)
}

// releaseRead frees who's leases found by reading them: some of them
// (ids), or every one of a holder this store did not grant.
func (s *Store) releaseRead(ctx context.Context, who lease.Holder, h *held, ids []string) (int, error) {
	recs, _, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var gone []string
	left := 0
	for _, rc := range recs {
		if rc.Lease.Holder != who {
			continue
		}
		if len(ids) == 0 || want[rc.Lease.ID] {
			gone = append(gone, rc.key)
		} else {
			left++
		}
	}
	n, err := s.delete(ctx, gone, lease.Released)
	if err != nil {
		return n, err
	}
	if h != nil {
		s.mu.Lock()
		for _, k := range gone {
			delete(h.keys, k)
		}
		s.mu.Unlock()
		if left == 0 {
			s.forget(who, h, true)
		}
	}
	return n, nil
}

// freeingMax bounds the deletions whose end the event stream is told; a
// store without subscribers would otherwise keep them all.
const freeingMax = 4096

// delete runs the deletions of keys, telling the event stream they end as
// st.
func (s *Store) delete(ctx context.Context, keys []string, st lease.State) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	ops := make([]clientv3.Op, len(keys))
	s.mu.Lock()
	for i, k := range keys {
		ops[i] = clientv3.OpDelete(k)
		if len(s.freeing) < freeingMax {
			s.freeing[k] = st
		}
	}
	s.mu.Unlock()
	r, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, s.unavailable(err)
	}
	n := 0
	for _, op := range r.Responses {
		n += int(op.GetResponseDeleteRange().Deleted)
	}
	return n, nil
}

// Revoke implements lease.Store.
func (s *Store) Revoke(ctx context.Context, idOrSession string) (int, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	recs, _, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	var keys []string
	for _, rc := range recs {
		if rc.Lease.ID == idOrSession || rc.Lease.Holder.Session == idOrSession {
			keys = append(keys, rc.key)
		}
	}
	return s.delete(ctx, keys, lease.Revoked)
}

// List implements lease.Store (leases held now; ended ones are not kept).
func (s *Store) List(ctx context.Context, f lease.Filter) ([]lease.Lease, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	recs, _, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	var out []lease.Lease
	for _, rc := range recs {
		l := rc.Lease
		if f.Tenant != "" && l.Holder.Tenant != f.Tenant || f.Session != "" && l.Holder.Session != f.Session ||
			f.Overlapping != nil && !lease.Overlap(*f.Overlapping, l.Resource) {
			continue
		}
		out = append(out, l)
	}
	return out, nil
}

// Close stops the keep-alives (the leases then run out after their TTL).
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for who, h := range s.sess {
		h.cancel()
		delete(s.sess, who)
	}
	for _, h := range s.pool {
		h.cancel()
	}
	s.pool = nil
	return nil
}

// FenceCmp is the compare a writer adds to its own etcd Txn so that the
// write commits only while the lease l still holds (its key exists with the
// create revision l.Fence): a lost lease's holder cannot act on it.
func (s *Store) FenceCmp(l lease.Lease) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.keyOf(l.Resource, l.ID)), "=", l.Fence)
}

// CheckFence reports whether l's grant still holds in etcd now; ErrGone
// when it does not (a stale token).
func (s *Store) CheckFence(ctx context.Context, l lease.Lease) error {
	ctx, cancel := bound(ctx)
	defer cancel()
	// A transaction of compares alone counts as a serializable read in
	// etcd: any member answers from its own copy, which may not have the
	// grant yet. The linearizable Get of the key makes it a read the
	// leader confirms (ReadIndex).
	key := s.keyOf(l.Resource, l.ID)
	r, err := s.cli.Txn(ctx).If(s.FenceCmp(l)).Then(clientv3.OpGet(key)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return s.unavailable(err)
	}
	if !r.Succeeded {
		return fmt.Errorf("%w: fencing token %d of lease %s is stale", lease.ErrGone, l.Fence, l.ID)
	}
	return nil
}

var _ lease.Store = (*Store)(nil)
