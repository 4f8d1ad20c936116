//go:build linux

package session

import (
	"sync/atomic"

	"github.com/klocklabs/klock/enforcer/lsm"
	"github.com/klocklabs/klock/enforcer/netguard"
	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/unixguard"
	"github.com/klocklabs/klock/policy"
)

// loading obtains the bpf-lsm wall, the observer and the network guards
// in the background: in the embedded path each is a BPF load (the
// kernel's BTF, the verifier, the maps) of tens of milliseconds, so they
// run at the same time as each other and as the rest of the session's
// setup (reading the host's lease journal, the leases) and preparation
// (stage 2, the backup). From klockd's Shared they are ready at once.
type loading struct {
	need loadNeeds
	lsm  chan loadedLSM // nil: the choice of wall rules bpf-lsm out
	obs  chan loadedObserver
	ng   chan loadedGuard     // nil: the session needs no guard (own netns)
	ug   chan loadedUnixGuard // nil: the session cannot have a Landlock wall
	// claimed: prepare took it (claim); else the runner discards it.
	claimed atomic.Bool
}

// loadNeeds are what a session loads besides the observer.
type loadNeeds struct{ lsm, guard, unix bool }

// needs are the loads a session with ruleset rs and backend choice needs;
// netAlways loads cgroup-net whatever the manifest declares (a
// container's network namespace is its runtime's: a bridge, the host's).
func needs(rs *policy.Ruleset, choice Backend, netAlways bool) loadNeeds {
	if choice == "" {
		choice = BackendAuto
	}
	return loadNeeds{
		lsm:   choice != BackendLandlock && choice != BackendObserve,
		guard: netAlways || netWalled(rs, choice),
		unix:  unixWalled(choice),
	}
}

type loadedLSM struct {
	l   *lsm.LSM
	own bool
	err error
}

type loadedObserver struct {
	o   *observe.Observer
	own bool
	err error
}

type loadedGuard struct {
	g   *netguard.Guard
	own bool
	err error
}

type loadedUnixGuard struct {
	g   *unixguard.Guard
	own bool
	err error
}

func startLoading(shared *Shared, need loadNeeds) *loading {
	l := &loading{need: need, obs: make(chan loadedObserver, 1)}
	if need.lsm {
		l.lsm = make(chan loadedLSM, 1)
		go func() {
			b, own, err := shared.lsmBackend()
			l.lsm <- loadedLSM{b, own, err}
		}()
	}
	go func() {
		o, own, err := shared.observer()
		l.obs <- loadedObserver{o, own, err}
	}()
	needGuard, needUnix := need.guard, need.unix
	if needGuard {
		l.ng = make(chan loadedGuard, 1)
		go func() {
			g, own, err := shared.guard()
			l.ng <- loadedGuard{g, own, err}
		}()
	}
	if needUnix {
		l.ug = make(chan loadedUnixGuard, 1)
		go func() {
			g, own, err := shared.unixGuard()
			l.ug <- loadedUnixGuard{g, own, err}
		}()
	}
	return l
}

// claim takes l for a session's preparation when it loads what need
// says, once; nil or not claimed: the caller loads its own.
func (l *loading) claim(need loadNeeds) bool {
	return l != nil && l.need == need && l.claimed.CompareAndSwap(false, true)
}

// unclaimed discards l unless prepare claimed it (the runner's cleanup).
func (l *loading) unclaimed() {
	if l.claimed.CompareAndSwap(false, true) {
		l.discard()
	}
}

// lsmBackend waits for the bpf-lsm wall's load.
func (l *loading) lsmBackend() loadedLSM {
	r := <-l.lsm
	l.lsm = nil
	return r
}

// observer waits for the observer; each result is taken once.
func (l *loading) observer() loadedObserver {
	r := <-l.obs
	l.obs = nil
	return r
}

// guard waits for the network guard.
func (l *loading) guard() loadedGuard {
	r := <-l.ng
	l.ng = nil
	return r
}

// unixGuard waits for the AF_UNIX guard.
func (l *loading) unixGuard() loadedUnixGuard {
	r := <-l.ug
	l.ug = nil
	return r
}

// discard waits for what was not taken and closes what this session
// loaded itself, so a session that gives up early leaves nothing loaded.
func (l *loading) discard() {
	if l.lsm != nil {
		if r := l.lsmBackend(); r.err == nil && r.own {
			r.l.Close()
		}
	}
	if l.obs != nil {
		if r := l.observer(); r.err == nil && r.own {
			r.o.Close()
		}
	}
	if l.ng != nil {
		if r := l.guard(); r.err == nil && r.own {
			r.g.Close()
		}
	}
	if l.ug != nil {
		if r := l.unixGuard(); r.err == nil && r.own {
			r.g.Close()
		}
	}
}
