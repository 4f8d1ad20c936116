//go:build linux

package session

import (
	"github.com/klocklabs/klock/enforcer/netguard"
	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/unixguard"
)

// loading obtains the observer and the network guard in the background:
// in the embedded path each is a BPF load (the kernel's BTF, the verifier,
// the maps) of tens of milliseconds, so they run at the same time as each other and
// as the rest of the session's preparation (the bpf-lsm attempt, stage 2,
// the backup). From klockd's Shared they are ready at once.
type loading struct {
	obs chan loadedObserver
	ng  chan loadedGuard     // nil: the session needs no guard (own netns)
	ug  chan loadedUnixGuard // nil: the session cannot have a Landlock wall
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

func startLoading(shared *Shared, needGuard, needUnix bool) *loading {
	l := &loading{obs: make(chan loadedObserver, 1)}
	go func() {
		o, own, err := shared.observer()
		l.obs <- loadedObserver{o, own, err}
	}()
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
