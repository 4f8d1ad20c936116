package etcdstore

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
)

// Subscribe is the fleet's KLIS-7 event stream: a watch on the lease keys
// from now on, so LeaseGranted and LeaseFreed of every host arrive (the
// lease API's /v1/events, a session noticing its lease revoked on another
// host). A subscriber that does not keep up loses events, as with
// lease.Table. When the watch breaks (no leader, a compaction) it is made
// again from the last revision seen, or from now when that revision is
// gone.
//
// etcd does not say why a key was deleted. A deletion this store made
// is Released or Revoked as it made it; one of another host's holder is
// shown Released (its own release, most often); one of this host's
// holder that this store did not make is Revoked (another host's
// operator, or an expiry): a session then checks what it still holds.
func (s *Store) Subscribe(buf int) (<-chan lease.Event, func()) {
	ch := make(chan lease.Event, buf)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ready := make(chan struct{})
	madeOnce := sync.OnceFunc(func() { close(ready) })
	go func() {
		defer close(done)
		defer close(ch)
		var rev int64
		for ctx.Err() == nil {
			rev = s.watchFrom(ctx, rev, ch, madeOnce)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	// Events from the return on are seen: wait for the watch to be made
	// (not forever: an unreachable etcd shows on the next request).
	select {
	case <-ready:
	case <-time.After(2 * time.Second):
	}
	return ch, sync.OnceFunc(func() { cancel(); <-done })
}

// watchFrom forwards events after rev (0: from now) until the watch
// ends; it returns the last revision it forwarded.
func (s *Store) watchFrom(ctx context.Context, rev int64, ch chan<- lease.Event, made func()) int64 {
	defer made() // a watch that could not be made: do not keep Subscribe waiting
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev+1))
	}
	for r := range s.cli.Watch(clientv3.WithRequireLeader(ctx), s.leasePrefix(), opts...) {
		if r.CompactRevision > 0 {
			return 0 // what was missed is gone: go on from now
		}
		if r.Err() != nil {
			return rev
		}
		if r.Created {
			made()
		}
		for _, ev := range r.Events {
			if e, ok := s.event(ev); ok {
				select {
				case ch <- e:
				default:
				}
			}
			rev = ev.Kv.ModRevision
		}
	}
	return rev
}

// event is the lease event of one etcd key event.
func (s *Store) event(ev *clientv3.Event) (lease.Event, bool) {
	if ev.Type == mvccpb.PUT {
		if !ev.IsCreate() {
			return lease.Event{}, false
		}
		rc, ok := parseRecord(ev.Kv)
		return lease.Event{Type: lease.LeaseGranted, Time: rc.Lease.AcquiredAt, Lease: rc.Lease}, ok
	}
	if ev.PrevKv == nil {
		return lease.Event{}, false
	}
	rc, ok := parseRecord(ev.PrevKv)
	if !ok {
		return lease.Event{}, false
	}
	l := rc.Lease
	l.EndedAt = time.Now()
	l.State = s.freedAs(string(ev.Kv.Key), l)
	return lease.Event{Type: lease.LeaseFreed, Time: l.EndedAt, Lease: l}, true
}

// freedAs says how a deleted lease key ended (see Subscribe).
func (s *Store) freedAs(key string, l lease.Lease) lease.State {
	s.mu.Lock()
	st, ok := s.freeing[key]
	delete(s.freeing, key)
	s.mu.Unlock()
	switch {
	case ok:
		return st
	case l.Host != s.host:
		return lease.Released
	}
	return lease.Revoked
}

// parseRecord reads one lease key's record.
func parseRecord(kv *mvccpb.KeyValue) (record, bool) {
	var rc record
	if json.Unmarshal(kv.Value, &rc) != nil {
		return rc, false
	}
	res, err := lease.ParseResource(rc.Resource)
	if err != nil {
		return rc, false
	}
	rc.Lease.Resource = res
	rc.Lease.Fence = kv.CreateRevision
	if rc.AgeRev == 0 {
		rc.AgeRev = kv.CreateRevision
	}
	rc.key = string(kv.Key)
	return rc, true
}
