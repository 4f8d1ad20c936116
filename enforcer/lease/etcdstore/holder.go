package etcdstore

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
)

// holderLease is the etcd lease h's keys are bound to, granted with the
// request's TTL on its first grant and kept alive until released or lost.
func (s *Store) holderLease(ctx context.Context, req *lease.Request) (*held, error) {
	s.mu.Lock()
	h := s.sess[req.Holder]
	s.mu.Unlock()
	if h != nil {
		return h, nil
	}
	ttl := req.TTL
	if ttl <= 0 {
		ttl = lease.DefaultTTL
	}
	ttl = min(ttl, lease.MaxTTL)
	secs := max(int64((ttl+time.Second-1)/time.Second), 1)
	g, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return nil, unavailable(err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	ch, err := s.cli.KeepAlive(kctx, g.ID)
	if err != nil {
		cancel()
		return nil, unavailable(err)
	}
	h = &held{id: g.ID, ttl: time.Duration(secs) * time.Second, cancel: cancel}
	s.mu.Lock()
	if o := s.sess[req.Holder]; o != nil { // raced: keep the first
		s.mu.Unlock()
		cancel()
		_, _ = s.cli.Revoke(ctx, g.ID)
		return o, nil
	}
	s.sess[req.Holder] = h
	delete(s.gone, req.Holder)
	s.mu.Unlock()
	go s.watchKeepAlive(req.Holder, h, ch, kctx)
	return h, nil
}

// watchKeepAlive drains the keep-alive responses; when the channel closes
// while the holder still holds the lease (etcd unreachable past the TTL,
// or the lease revoked), the holder is lost and told on Lost.
func (s *Store) watchKeepAlive(who lease.Holder, h *held, ch <-chan *clientv3.LeaseKeepAliveResponse, ctx context.Context) {
	for range ch {
	}
	if ctx.Err() != nil { // released on purpose
		return
	}
	s.forget(who, h)
	s.mu.Lock()
	s.gone[who] = true
	s.mu.Unlock()
	select {
	case s.lost <- who:
	default:
	}
}

func (s *Store) forget(who lease.Holder, h *held) {
	s.mu.Lock()
	if s.sess[who] == h {
		delete(s.sess, who)
	}
	s.mu.Unlock()
	h.cancel()
}

// Heartbeat implements lease.Store: it renews h's etcd lease once (the
// background keep-alive renews it too).
func (s *Store) Heartbeat(ctx context.Context, who lease.Holder) (time.Time, error) {
	s.mu.Lock()
	h, lost := s.sess[who], s.gone[who]
	s.mu.Unlock()
	if lost {
		return time.Time{}, fmt.Errorf("%w: %w", lease.ErrLost, lease.ErrGone)
	}
	if h == nil {
		return time.Time{}, lease.ErrGone
	}
	r, err := s.cli.KeepAliveOnce(ctx, h.id)
	if err != nil {
		// Not gone yet: the background keep-alive decides, at the TTL.
		return time.Time{}, unavailable(err)
	}
	if r.TTL <= 0 {
		return time.Time{}, lease.ErrGone
	}
	return time.Now().Add(time.Duration(r.TTL) * time.Second), nil
}

// Release implements lease.Store.
func (s *Store) Release(ctx context.Context, who lease.Holder, ids ...string) (int, error) {
	recs, _, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var ops []clientv3.Op
	left := 0
	for _, rc := range recs {
		if rc.Lease.Holder != who {
			continue
		}
		if len(ids) == 0 || want[rc.Lease.ID] {
			ops = append(ops, clientv3.OpDelete(s.leasePrefix()+rc.Lease.ID))
		} else {
			left++
		}
	}
	n, err := s.delete(ctx, ops)
	if err == nil && left == 0 {
		s.mu.Lock()
		h := s.sess[who]
		s.mu.Unlock()
		if h != nil {
			s.forget(who, h)
			_, _ = s.cli.Revoke(ctx, h.id)
		}
	}
	return n, err
}

func (s *Store) delete(ctx context.Context, ops []clientv3.Op) (int, error) {
	if len(ops) == 0 {
		return 0, nil
	}
	r, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, unavailable(err)
	}
	n := 0
	for _, op := range r.Responses {
		n += int(op.GetResponseDeleteRange().Deleted)
	}
	return n, nil
}

// Revoke implements lease.Store.
func (s *Store) Revoke(ctx context.Context, idOrSession string) (int, error) {
	recs, _, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	var ops []clientv3.Op
	for _, rc := range recs {
		if rc.Lease.ID == idOrSession || rc.Lease.Holder.Session == idOrSession {
			ops = append(ops, clientv3.OpDelete(s.leasePrefix()+rc.Lease.ID))
		}
	}
	return s.delete(ctx, ops)
}

// List implements lease.Store (leases held now; ended ones are not kept).
func (s *Store) List(ctx context.Context, f lease.Filter) ([]lease.Lease, error) {
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
	return nil
}

// FenceCmp is the compare a writer adds to its own etcd Txn so that the
// write commits only while the lease l still holds (its key exists with the
// create revision l.Fence): a lost lease's holder cannot act on it.
func (s *Store) FenceCmp(l lease.Lease) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.leasePrefix()+l.ID), "=", l.Fence)
}

// CheckFence reports whether l's grant still holds in etcd now; ErrGone
// when it does not (a stale token).
func (s *Store) CheckFence(ctx context.Context, l lease.Lease) error {
	r, err := s.cli.Txn(ctx).If(s.FenceCmp(l)).Commit()
	if err != nil {
		return unavailable(err)
	}
	if !r.Succeeded {
		return fmt.Errorf("%w: fencing token %d of lease %s is stale", lease.ErrGone, l.Fence, l.ID)
	}
	return nil
}

var _ lease.Store = (*Store)(nil)
