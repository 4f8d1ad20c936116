//go:build linux

package session

import (
	"context"
	"errors"
	"fmt"
	"github.com/klocklabs/klock/enforcer/vlog"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/policy"
)

// prepared is a session whose agent runs, walled and watched.
type prepared struct {
	be       *backends
	proc     *launch.Process
	restorer Restorer
	start    time.Time
}

type netResult struct {
	n   *sessionNet
	err error
	// dnsErr: the session's DNS proxy could not listen in the namespace
	// (never degraded: the session refuses to start).
	dnsErr error
}

// walledNS builds the packet wall and the relays around pid's network
// namespace and starts the session's DNS proxy in it. A namespace
// already gone (stage 2 exited: it is started over) is left for the new
// one.
func walledNS(ctx context.Context, o Options, id string, pid int, plan netPlan, log *slog.Logger) netResult {
	n, err := setupNet(ctx, id, pid, plan, log)
	if err != nil && errors.Is(err, os.ErrNotExist) {
		return netResult{n, err, nil}
	}
	dnsErr := o.dns.listenIn(netNSPath(pid))
	if dnsErr != nil && errors.Is(dnsErr, os.ErrNotExist) {
		// Gone since the wall was built: the same as above.
		n.close()
		return netResult{nil, dnsErr, nil}
	}
	return netResult{n, err, dnsErr}
}

type backupResult struct {
	r   Restorer
	err error
}

// prepare puts the kernel backends on g, takes the pre-flight backup and
// starts the agent once logged (the session's first log is on disk) says
// so. The independent steps overlap: the BPF loads run in
// the background from the start, and stage 2 (klock's re-exec, which sets
// up namespaces, Landlock and seccomp) runs while the network programs are
// attached and the backup is taken; it execs the agent only once all of
// that is done (launch.Pending.Release). What has to come first still does:
// bpf-lsm and the observer's watch are in place before stage 2 exists (both
// count that process's execs to find the agent's), and nothing that can
// refuse the session (ErrDegraded) comes after the backup is started. On
// error nothing is left running or loaded.
func prepare(ctx context.Context, o Options, rs *policy.Ruleset, id string, g *cgroup.Group, exclude []string, spec launch.Spec, dirs []string, logged func() error, log *slog.Logger) (_ *prepared, err error) {
	choice := o.Backend
	if choice == "" {
		choice = BackendAuto
	}
	l := startLoading(o.Backends, netWalled(rs, choice), unixWalled(choice))
	be := &backends{allowDegraded: o.AllowDegraded, log: log}
	var pending *launch.Pending
	var backup chan backupResult
	defer func() {
		if err == nil {
			return
		}
		if pending != nil {
			pending.Abort()
		}
		if backup != nil {
			// Never leave it writing behind the caller's back; a backup
			// that completed stays, as any backup of a session that failed
			// to start does.
			<-backup
		}
		l.discard()
		be.close()
	}()
	takeBackup := func() {
		if o.Snapshot == nil {
			return
		}
		backup = make(chan backupResult, 1)
		go func() {
			r, err := o.Snapshot(ctx, Preflight{Ruleset: rs, ID: id, AgentUID: spec.User.UID, AgentGIDs: append([]uint32{spec.User.GID}, spec.User.Groups...), Others: exclude,
				PrivateTmp: o.privTmp})
			o.tl.mark("backup")
			backup <- backupResult{r, err}
		}()
	}

	if err := be.attachLSM(g, rs, o.Backends, choice); err != nil {
		return nil, err
	}
	o.tl.mark("bpf-lsm")
	if err := be.attachObserver(g, l.observer(), dirs); err != nil {
		return nil, err
	}
	o.tl.mark("observer")
	spec.NoLandlock = be.lsms != nil || choice == BackendObserve
	// An observe-only run refuses nothing it can record (the observer
	// reports the ioctls it lets through).
	spec.DenyMetaIoctls = choice != BackendObserve && launch.MetaIoctlsRefused(rs, be.lsms != nil, be.watch != nil)
	be.metaIoctlsRefused = spec.DenyMetaIoctls
	start := time.Now()
	// Stage 2 (re-exec and runtime start of klock's binary) is the longest
	// step once the BPF programs are loaded: it starts before the backup
	// competes with it for the CPUs.
	if pending, err = launch.Spawn(ctx, spec); err != nil {
		return nil, err
	}
	o.tl.mark("stage 2 spawned")
	if err := be.observeInAgentRoot(pending.Pid()); err != nil {
		return nil, err
	}
	// relaunched: what Release calls with a new stage 2's pid (a new
	// namespace for every step below that was built around the old one).
	relaunchSteps := []func(pid int) error{be.observeInAgentRoot}
	pending.OnRelaunch(func(pid int) error {
		for _, f := range relaunchSteps {
			if err := f(pid); err != nil {
				return err
			}
		}
		return nil
	})
	// The agent's own namespace exists with stage 2: the packet wall
	// and the relays are built around it while stage 2 and the cgroup
	// programs get ready, before the agent runs.
	var joined chan netResult
	// netLater: stage 2 was gone before its namespace could be walled
	// (a klock-stage2 of another build exits at once): Release starts it
	// over, and the wall is built for the new one (OnRelaunch), or
	// Release says why stage 2 failed.
	netLater, relaunched := false, false
	walled := spec.NewNetNS && !launch.NeedsNetNS(rs)
	if o.dns != nil && !walled {
		// Not reached: a session gets a DNS proxy only with a namespace
		// of its own (netWalled), where the proxy listens.
		return nil, fmt.Errorf("%w: the session's DNS proxy needs the session's own network namespace", ErrSetup)
	}
	if walled {
		var dnsAddr netip.Addr
		if o.dns != nil {
			dnsAddr = o.dns.addr()
		}
		plan := planNet(rs, o.Manifest.EgressBudget(), dnsAddr)
		plan.pingGID = spec.User.GID
		joined = make(chan netResult, 1)
		pid := pending.Pid()
		go func() { joined <- walledNS(ctx, o, id, pid, plan, log) }()
		relaunchSteps = append(relaunchSteps, func(pid int) error {
			// A new stage 2, a new namespace: the wall is built again,
			// and the DNS proxy listens in the new one.
			relaunched = true
			be.net.close()
			be.net = nil
			be.list = slices.DeleteFunc(be.list, func(b vlog.Backend) bool { return b.Name == "netwall" })
			r := walledNS(ctx, o, id, pid, plan, log)
			if r.dnsErr != nil {
				r.n.close()
				return fmt.Errorf("%w: %v (a session that declares a host name and walls the network needs its DNS proxy; it never falls back to the open port 53)", ErrSetup, r.dnsErr)
			}
			if err := be.joinedNet(r.n, r.err); err != nil {
				return err
			}
			o.dns.setNet(be.net)
			return nil
		})
	}
	joinedNet := func() error {
		if joined == nil {
			return nil
		}
		r := <-joined
		joined = nil
		if r.err != nil && errors.Is(r.err, os.ErrNotExist) {
			// Stage 2 is our unreaped child: its pid is not reused, and a
			// namespace gone means stage 2 is.
			log.Debug("stage 2 ended before its namespace was walled", "error", r.err)
			netLater = true
			return nil
		}
		if r.dnsErr != nil {
			r.n.close()
			return fmt.Errorf("%w: %v (a session that declares a host name and walls the network needs its DNS proxy; it never falls back to the open port 53)", ErrSetup, r.dnsErr)
		}
		if err := be.joinedNet(r.n, r.err); err != nil {
			return err
		}
		o.dns.setNet(be.net)
		return nil
	}
	defer func() { _ = joinedNet() }() // never leave it building behind the caller's back
	if o.AllowDegraded {
		// Nothing after this point refuses the session.
		takeBackup()
	}
	if err := be.attachNet(g, rs, l, choice); err != nil {
		return nil, err
	}
	o.tl.mark("cgroup-net")
	if err := be.attachUnix(g, rs, l); err != nil {
		return nil, err
	}
	o.tl.mark("cgroup-unix")
	if err := joinedNet(); err != nil {
		return nil, err
	}
	o.tl.mark("netwall")
	if !o.AllowDegraded {
		takeBackup()
	}
	var restorer Restorer
	if backup != nil {
		r := <-backup
		backup = nil
		if r.err != nil {
			return nil, fmt.Errorf("%w: pre-flight backup: %v (the agent was not started)", ErrSetup, r.err)
		}
		restorer = r.r
	}
	o.tl.mark("backup taken")
	if err := logged(); err != nil {
		return nil, err
	}
	o.tl.mark("begun log")
	proc, err := pending.Release()
	pending = nil // Release cleans up after itself
	if err != nil {
		return nil, err
	}
	if netLater && !relaunched {
		// Not reached: a stage 2 gone before Release fails or starts
		// over. Never run an agent whose namespace was not walled.
		_ = proc.Kill()
		_, _ = proc.Wait()
		return nil, fmt.Errorf("%w: stage 2 ended before its network namespace was walled, yet the agent ran", ErrSetup)
	}
	return &prepared{be: be, proc: proc, restorer: restorer, start: start}, nil
}
