//go:build linux

package lsm

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Probe has the session decide, from now until release, every operation
// of process pid (a thread group, in klock's pid namespace) as if it were
// armed, and never count its exec towards arming: the process proves the
// wall (canaries) in the session's cgroup while the session still waits
// for its agent's exec (ArmAtFirstExec: a container adopted through OCI
// hooks alone). The process must join the cgroup after Probe returns.
func (s *Session) Probe(pid int) (release func(), err error) {
	key, one := uint32(pid), uint8(1)
	if err := s.l.objs.LsmProbes.Update(key, one, ebpf.UpdateAny); err != nil {
		return nil, fmt.Errorf("%w: probe pid %d in cgroup %d: %w", ErrAttach, pid, s.cgid, err)
	}
	return func() { _ = s.l.objs.LsmProbes.Delete(key) }, nil
}
