//go:build linux

package unixguard

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/policy"
)

var probe struct {
	once sync.Once
	err  error
}

// Probe reports whether this kernel has the cgroup AF_UNIX address hooks
// and the wall works: it loads the programs, attaches both to a scratch
// cgroup with an empty ruleset, detaches and removes the cgroup. It asks
// the kernel, never its version: a kernel without the hooks refuses the
// programs' attach type at load. The answer is cached for the life of the
// process; nil means connects and datagrams to pathname sockets can be
// refused before they reach their listener.
func Probe() error {
	probe.once.Do(func() { probe.err = probeOnce() })
	return probe.err
}

func probeOnce() (err error) {
	g, err := Load()
	if err != nil {
		return err
	}
	defer func() {
		if cerr := g.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("unixguard probe: unload: %w", cerr)
		}
	}()
	cg, err := cgroup.Create(fmt.Sprintf("unixguard-probe-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		return fmt.Errorf("unixguard probe: scratch cgroup: %w", err)
	}
	defer func() {
		if derr := cg.Delete(); err == nil && derr != nil {
			err = fmt.Errorf("unixguard probe: remove scratch cgroup: %w", derr)
		}
	}()
	s, err := g.Attach(cg, &policy.Ruleset{})
	if err != nil {
		return err
	}
	return s.Close()
}
