package etcdstore

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Age keys are not deleted when a holder releases (a requester keeps its
// age across retries), so that they do not pile up in etcd for ever each
// is bound to an age lease: an etcd lease of AgeKeep that is never kept
// alive, granted anew every ageEvery, so a session's age key lasts at
// least AgeKeep - ageEvery. A session that asks again after that is
// registered again, younger; the leases it still holds keep the age they
// were granted with.
const (
	AgeKeep  = 25 * time.Hour
	ageEvery = time.Hour
)

// ageLease is the etcd lease new age keys are bound to.
type ageLease struct {
	id    clientv3.LeaseID
	until time.Time // when a new one is granted
}

// agePut is the put of h's age key, bound to the current age lease.
func (s *Store) agePut(ctx context.Context, key string) (clientv3.Op, error) {
	s.mu.Lock()
	al := s.age
	s.mu.Unlock()
	if al.id == 0 || time.Now().After(al.until) {
		g, err := s.cli.Grant(ctx, int64(AgeKeep/time.Second))
		if err != nil {
			return clientv3.Op{}, s.unavailable(err)
		}
		al = ageLease{id: g.ID, until: time.Now().Add(ageEvery)}
		s.mu.Lock()
		s.age = al
		s.mu.Unlock()
	}
	return clientv3.OpPut(key, s.host, clientv3.WithLease(al.id)), nil
}
