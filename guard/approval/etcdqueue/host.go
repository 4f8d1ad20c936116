package etcdqueue

import (
	"errors"
	"fmt"

	"github.com/klocklabs/klock/enforcer/fleet"
	"github.com/klocklabs/klock/guard/approval"
)

// OpenHost is the approval queue the klock processes of this host share:
// the fleet's on etcd when the fleet marker says the host is in a fleet
// (fleet.ReadMarker), else the queue directory dir (approval.Open).
// close releases the etcd client. Opening the fleet's queue does not
// contact etcd: an unreachable cluster shows on the first operation, as
// approval.ErrUnreachable.
func OpenHost(dir string, opts ...Option) (q approval.Queue, close func(), err error) {
	c, err := fleet.ReadMarker()
	if errors.Is(err, fleet.ErrNoFleet) {
		s, err := approval.Open(dir)
		if err != nil {
			return nil, nil, err
		}
		return s, func() {}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: this host is in a fleet, but %v", approval.ErrStore, err)
	}
	cli, c, err := fleet.Dial(c)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the fleet's approval queue (%s): %v; or remove %s if this host has left the fleet", approval.ErrStore, c, err, fleet.MarkerPath())
	}
	return New(cli, c.Prefix, c.Host, opts...), func() { cli.Close() }, nil
}

// Fleet reports whether q is a fleet's queue (its requests name hosts).
func Fleet(q approval.Queue) bool {
	_, ok := q.(*Queue)
	return ok
}
