//go:build linux

package session

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/klocklabs/klock/enforcer/lsm"
	"github.com/klocklabs/klock/enforcer/netguard"
	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/unixguard"
)

// Shared holds kernel backends loaded once and used by many sessions (the
// klockd daemon keeps one for its lifetime). A session given a Shared
// watches its cgroup with the shared Observer and attaches its cgroup to the
// shared Guard instead of loading the BPF programs itself, and never closes
// them. A nil field means that backend is unavailable on this host: the
// session then degrades (or refuses, ErrDegraded) exactly as when its own
// load fails, with the recorded load error as the reason.
type Shared struct {
	Observer    *observe.Observer
	ObserverErr error // why Observer is nil
	Guard       *netguard.Guard
	GuardErr    error // why Guard is nil
	LSM         *lsm.LSM
	LSMErr      error // why LSM is nil
	// UnixGuard walls pathname AF_UNIX sockets for Landlock sessions
	// (nil: the kernel has no cgroup AF_UNIX hooks; UnixGuardErr says why).
	UnixGuard    *unixguard.Guard
	UnixGuardErr error
}

// LoadShared loads both backends once. It never fails: a backend that
// cannot load is nil with its error recorded, for sessions to report.
func LoadShared(opts observe.Options) *Shared {
	s := &Shared{}
	s.Observer, s.ObserverErr = observe.LoadOptions(opts)
	s.Guard, s.GuardErr = netguard.Load()
	s.UnixGuard, s.UnixGuardErr = unixguard.Load()
	// The trial first, as the embedded path does: where BPF LSM cannot
	// load, it says why (the full load's EPERM reads as a memlock limit).
	if s.LSMErr = lsm.Loadable(); s.LSMErr == nil {
		s.LSM, s.LSMErr = lsm.Load()
	}
	return s
}

// Close unloads what LoadShared loaded. Every session using s must have
// ended first.
func (s *Shared) Close() error {
	var errs []error
	if s.Observer != nil {
		errs = append(errs, s.Observer.Close())
		s.Observer = nil
	}
	if s.Guard != nil {
		errs = append(errs, s.Guard.Close())
		s.Guard = nil
	}
	if s.LSM != nil {
		errs = append(errs, s.LSM.Close())
		s.LSM = nil
	}
	if s.UnixGuard != nil {
		errs = append(errs, s.UnixGuard.Close())
		s.UnixGuard = nil
	}
	return errors.Join(errs...)
}

// Programs are the BPF programs of the loaded backends by backend and
// name ("observe", "lsm", "netguard", "unixguard"), for their run-time
// statistics (klockd --metrics-bpf-stats). Read it while s is open.
func (s *Shared) Programs() map[string]map[string]*ebpf.Program {
	out := map[string]map[string]*ebpf.Program{}
	if s.Observer != nil {
		out["observe"] = s.Observer.Programs()
	}
	if s.LSM != nil {
		out["lsm"] = s.LSM.Programs()
	}
	if s.Guard != nil {
		out["netguard"] = s.Guard.Programs()
	}
	if s.UnixGuard != nil {
		out["unixguard"] = s.UnixGuard.Programs()
	}
	return out
}

var errNotLoaded = errors.New("not loaded by the daemon")

// observer returns the shared Observer, or loads one the session owns when
// s is nil (the embedded path).
func (s *Shared) observer() (o *observe.Observer, owned bool, err error) {
	if s == nil {
		o, err = observe.Load()
		return o, true, err
	}
	if s.Observer == nil {
		return nil, false, fmt.Errorf("shared observer: %w", firstNonNil(s.ObserverErr, errNotLoaded))
	}
	return s.Observer, false, nil
}

// guard is observer's counterpart for the network Guard.
func (s *Shared) guard() (g *netguard.Guard, owned bool, err error) {
	if s == nil {
		g, err = netguard.Load()
		return g, true, err
	}
	if s.Guard == nil {
		return nil, false, fmt.Errorf("shared network guard: %w", firstNonNil(s.GuardErr, errNotLoaded))
	}
	return s.Guard, false, nil
}

// unixGuard is observer's counterpart for the AF_UNIX Guard.
func (s *Shared) unixGuard() (g *unixguard.Guard, owned bool, err error) {
	if s == nil {
		g, err = unixguard.Load()
		return g, true, err
	}
	if s.UnixGuard == nil {
		return nil, false, fmt.Errorf("shared AF_UNIX guard: %w", firstNonNil(s.UnixGuardErr, errNotLoaded))
	}
	return s.UnixGuard, false, nil
}

// lsmBackend is observer's counterpart for the BPF-LSM backend.
func (s *Shared) lsmBackend() (l *lsm.LSM, owned bool, err error) {
	if s == nil {
		if err := lsm.Loadable(); err != nil {
			return nil, true, err
		}
		l, err = lsm.Load()
		return l, true, err
	}
	if s.LSM == nil {
		return nil, false, fmt.Errorf("shared bpf-lsm: %w", firstNonNil(s.LSMErr, errNotLoaded))
	}
	return s.LSM, false, nil
}

func firstNonNil(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
