package svccheck

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/fleet"
)

// Fleet is the fleet this host's klockd shares its leases with (the fleet
// marker), and whether its etcd answers now.
type Fleet struct {
	fleet.Config
	Reachable bool   `json:"reachable"`
	Leases    int64  `json:"leases"` // lease keys under the prefix, every host's
	Why       string `json:"why,omitempty"`
}

// fleetProbe is how long doctor waits for the fleet's etcd.
const fleetProbe = 3 * time.Second

// checkFleet is the fleet's state, nil when the host is in none.
func checkFleet(ctx context.Context) *Fleet {
	c, err := fleet.ReadMarker()
	if errors.Is(err, fleet.ErrNoFleet) {
		return nil
	}
	f := &Fleet{Config: c}
	if err != nil {
		f.Why = err.Error()
		return f
	}
	cli, c, err := fleet.Dial(c)
	if err != nil {
		f.Why = err.Error()
		return f
	}
	defer cli.Close()
	f.Config = c
	ctx, cancel := context.WithTimeout(ctx, fleetProbe)
	defer cancel()
	r, err := cli.Get(ctx, c.Prefix+"/lease/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		f.Why = "etcd did not answer within " + fleetProbe.String() + ": " + err.Error() + "; no lease is granted on this host until it does (etcdctl --endpoints " + c.Endpoints[0] + " endpoint health)"
		return f
	}
	f.Reachable, f.Leases = true, r.Count
	return f
}
