//go:build linux

package netguard

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

// Probe reports whether the cgroup-net wall works on this host: it loads the
// programs, creates a scratch session cgroup, attaches every program with an
// empty ruleset, detaches, and removes the cgroup. The result is cached for
// the life of the process. nil means the wall can block connect, sendmsg,
// bind and socket creation per cgroup; the error says which step failed.
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
			err = fmt.Errorf("netguard probe: unload: %w", cerr)
		}
	}()
	cg, err := cgroup.Create(fmt.Sprintf("netguard-probe-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		return fmt.Errorf("netguard probe: scratch cgroup: %w", err)
	}
	defer func() {
		if derr := cg.Delete(); err == nil && derr != nil {
			err = fmt.Errorf("netguard probe: remove scratch cgroup: %w", derr)
		}
	}()
	s, err := g.Attach(cg, &policy.Ruleset{})
	if err != nil {
		return err
	}
	return s.Close()
}
