//go:build linux

package session

import (
	"fmt"
	"sync"

	"github.com/klocklabs/klock/enforcer/cgroup"
)

// sessionGroup is the session's cgroup: a new one under klock's, removed
// at the end, or a container's, which its runtime made and removes.
func sessionGroup(id string, c *Container) (*cgroup.Group, func(), error) {
	if c == nil {
		g, err := cgroup.Create(id)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrSetup, err)
		}
		return g, sync.OnceFunc(func() { _ = g.Delete() }), nil
	}
	dir := c.Cgroup
	if dir == "" {
		var err error
		if dir, err = cgroup.OfPid(c.Pid); err != nil {
			return nil, nil, fmt.Errorf("%w: container %s: %v", ErrSetup, c.ID, err)
		}
	}
	g, err := cgroup.OpenPath(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: container %s: %v", ErrSetup, c.ID, err)
	}
	return g, func() {}, nil
}
