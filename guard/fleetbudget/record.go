package fleetbudget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/guard/budget"
)

// Member is one member's allocation and usage in a grant's key.
type Member struct {
	Invocations     uint64 `json:"invocations"`
	Units           uint64 `json:"units"`
	UsedInvocations uint64 `json:"used_invocations"`
	UsedUnits       uint64 `json:"used_units"`
	At              string `json:"at"`
}

// Record is a grant's key: its limits and every member's share.
type Record struct {
	Currency       string             `json:"currency"`
	MaxTotalCost   *uint64            `json:"max_total_cost,omitempty"`
	MaxInvocations uint64             `json:"max_invocations"`
	Members        map[string]*Member `json:"members"`
}

// GrantKey is the etcd key of grant k under prefix.
func GrantKey(prefix string, k budget.Key) string {
	return strings.TrimRight(prefix, "/") + "/budget/" + url.PathEscape(k.Capability) + "/" + strconv.FormatUint(uint64(k.Grant), 10)
}

// parseKey reads a grant key back (the inverse of GrantKey).
func parseKey(prefix, key string) (budget.Key, bool) {
	rest, ok := strings.CutPrefix(key, strings.TrimRight(prefix, "/")+"/budget/")
	if !ok {
		return budget.Key{}, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return budget.Key{}, false
	}
	capab, err := url.PathUnescape(rest[:i])
	n, err2 := strconv.ParseUint(rest[i+1:], 10, 32)
	if err != nil || err2 != nil {
		return budget.Key{}, false
	}
	return budget.Key{Capability: capab, Grant: uint32(n)}, true
}

// allocated sums the members' allocations, leaving out skip.
func (r *Record) allocated(skip string) (inv, units uint64) {
	for name, m := range r.Members {
		if name != skip {
			inv += m.Invocations
			units += m.Units
		}
	}
	return inv, units
}

// Used sums the members' usage as they last wrote it.
func (r *Record) Used() (inv, units uint64) {
	for _, m := range r.Members {
		inv += m.UsedInvocations
		units += m.UsedUnits
	}
	return inv, units
}

func (r *Record) sameLimits(l budget.Limits) bool {
	return r.Currency == l.Currency && r.MaxInvocations == l.MaxInvocations &&
		(r.MaxTotalCost == nil) == (l.Total == nil) && (r.MaxTotalCost == nil || *r.MaxTotalCost == *l.Total)
}

// errRetry: the key changed between the read and the transaction.
var errRetry = errors.New("fleetbudget: key changed")

// cas reads key, lets fn change the record (fn's error ends the update
// unchanged) and writes it back only if the key did not change meanwhile,
// retrying on a changed key and on etcd errors until ctx ends. It reports
// the record as committed.
func cas(ctx context.Context, cli *clientv3.Client, key string, fn func(*Record) error) (*Record, error) {
	backoff := 10 * time.Millisecond
	var last error
	for {
		rec, err := casOnce(ctx, cli, key, fn)
		if err == nil || !retryable(err) {
			return rec, err
		}
		if !errors.Is(err, errRetry) {
			last = err
		}
		if ctx.Err() != nil {
			if last == nil {
				last = ctx.Err()
			}
			return nil, last
		}
		if errors.Is(err, errRetry) {
			continue // contention: decide again at once
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// errEtcd wraps a failure to reach etcd.
type errEtcd struct{ err error }

func (e errEtcd) Error() string { return e.err.Error() }
func (e errEtcd) Unwrap() error { return e.err }

func retryable(err error) bool {
	var ee errEtcd
	return errors.Is(err, errRetry) || errors.As(err, &ee)
}

func casOnce(ctx context.Context, cli *clientv3.Client, key string, fn func(*Record) error) (*Record, error) {
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return nil, errEtcd{err}
	}
	rec := &Record{}
	var rev int64
	if len(resp.Kvs) > 0 {
		rev = resp.Kvs[0].ModRevision
		if err := json.Unmarshal(resp.Kvs[0].Value, rec); err != nil {
			return nil, fmt.Errorf("%w: %s does not parse: %v", ErrCorrupt, key, err)
		}
	}
	if rec.Members == nil {
		rec.Members = map[string]*Member{}
	}
	if err := fn(rec); err != nil {
		return nil, err
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(val))).Commit()
	if err != nil {
		return nil, errEtcd{err}
	}
	if !tr.Succeeded {
		return nil, errRetry
	}
	return rec, nil
}
