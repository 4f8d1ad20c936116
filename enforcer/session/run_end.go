//go:build linux

package session

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// finish ends a session whose agent exited: the rollback of a kill, the
// walls brought down, the verification log written, the learned manifest
// of a permissive run.
func (r *runner) finish(ctx context.Context, ready *prepared, s *running) (*Result, error) {
	exit, _ := ready.proc.Wait()
	r.tl.mark("agent ended")
	// A container's stage 2 that found a wall not enforcing in strict mode
	// did not start the entrypoint: the session ends as klock's refusal,
	// with the error that names the wall and the kernel.
	refused := ready.proc.CanaryError()
	if refused != nil {
		r.log.Error("the container's entrypoint was not started", "error", refused)
		s.kill(refused.Error(), nil)
	}
	res := &Result{ID: r.id, Exit: exit, Killed: s.killed, Reason: s.reason, Interrupted: s.interrupted}
	if s.first != nil && s.first.Err != nil {
		res.Violation = s.first.Err
	}
	rollback, rolled := r.rollback(ctx, ready, s)
	res.Rollback = rolled
	r.ev.rollback(rollback)
	backendsUsed := r.backendsUsed(ready)
	// The wall's counters, read before it comes down with the backends.
	network := r.networkCounters(ready, &backendsUsed)
	// Every event was read before loop returned and the agent is gone: the
	// kernel side comes down while the log is built and written.
	torn := make(chan struct{})
	go func() {
		ready.closeBackends()
		r.deleteGroup()
		close(torn)
	}()
	defer func() { <-torn }()
	vl := r.buildLog(ready, s, exit, backendsUsed, network, rollback)
	path, err := vl.Write(r.sessionDir)
	if err != nil {
		r.ev.end(res, vl)
		return res, fmt.Errorf("write verification log: %w", err)
	}
	r.tl.mark("log written")
	res.LogPath, res.Log = path, vl
	r.ev.end(res, vl)
	r.finished(res)
	r.tl.log(r.log, "session end")
	r.learn(s, res)
	return res, refused
}

// rollback undoes a killed session (rollsBack says when) from its
// pre-flight backup: the workdir's roots and the changed paths outside,
// at their host paths, the private /tmp emptied instead (it started
// empty, and the backup holds nothing of it). Its stats are nil when no
// rollback ran.
func (r *runner) rollback(ctx context.Context, ready *prepared, s *running) ([]vlog.RollbackOp, *RollbackStats) {
	restorer := ready.restorer
	if !s.killed || restorer == nil || !rollsBack(r.mode, s.interrupted, r.o.RollbackOnInterrupt) {
		return nil, nil
	}
	start := time.Now()
	rec := s.eng.Records()
	roots := rollbackRoots(r.rs.Workdir, rec)
	changed, moved := changedPaths(rec)
	c := r.o.Container
	if c != nil {
		roots, changed, moved = c.hostScopes(roots), c.hostPaths(changed), c.hostPaths(moved)
	}
	if r.priv != nil {
		roots, changed, moved = dropTmpScopes(roots), dropTmpPaths(changed), dropTmpPaths(moved)
	}
	ops := rollBack(context.WithoutCancel(ctx), restorer, rollbackPlan{
		only: roots, changed: changed, moved: moved, leases: r.leases, log: r.log,
		self: intruder{session: r.id, agent: r.m.Agent.ID, violations: violationsByPath(rec, c), notices: r.o.noticeDir()},
	})
	if c != nil {
		c.nameInContainer(ops)
	}
	if r.priv != nil {
		ops = append(ops, r.priv.empty()...)
	}
	return ops, &RollbackStats{Duration: time.Since(start), Bytes: restoredBytes(ops)}
}

// restoredBytes sums the sizes of the regular files ops put back (at
// their host paths).
func restoredBytes(ops []vlog.RollbackOp) int64 {
	var n int64
	for _, op := range ops {
		switch op.Action {
		case vlog.RollbackRestored, vlog.RollbackRecreated, string(snapshot.MovedBack):
		default:
			continue
		}
		if fi, err := os.Lstat(op.Path); op.OK && err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// backendsUsed lists what walled and watched the session, for its log.
func (r *runner) backendsUsed(ready *prepared) []vlog.Backend {
	o, be, proc := r.o, ready.be, ready.proc
	var out []vlog.Backend
	switch {
	case o.Container != nil:
		out = o.Container.backends(proc.Landlock, be.lsmSkipped)
	case o.Backend == BackendObserve:
		out = append(out, observeOnlyBackend())
	case be.lsms == nil:
		out = append(out, landlockBackend(proc.Landlock, be.lsmSkipped))
	}
	if o.Container == nil {
		out = append(out, seccompBackend(be.metaIoctlsRefused))
	}
	out = append(out, be.list...)
	if r.dnsp != nil {
		out = append(out, r.dnsp.backend())
	}
	if r.priv != nil {
		out = append(out, r.priv.backend(o.KeepTmp))
	}
	if ready.restorer == nil {
		out = append(out, vlog.Backend{Name: "pre-flight backup", Guarantee: "unavailable",
			Details: []string{"no backup was taken: a detected-only violation is killed but not undone"}})
	}
	return out
}

// networkCounters reads the packet wall's counters (nil without one) and
// adds its entry to the backends.
func (r *runner) networkCounters(ready *prepared, backends *[]vlog.Backend) *vlog.Network {
	n := ready.be.net
	if n == nil {
		return nil
	}
	if n.relay != nil {
		// The agent is gone: its handed-over sockets end, and the
		// kernel reports their bytes (looprelay.WaitCounted).
		n.relay.WaitCounted(time.Second)
	}
	*backends = append(*backends, n.backend())
	network, err := n.counters()
	if err != nil {
		r.log.Warn("the network wall's counters", "error", err)
		return nil
	}
	network.Exceeded, _, _ = n.exceeded()
	return network
}

// buildLog is the session's verification log.
func (r *runner) buildLog(ready *prepared, s *running, exit launch.Exit, backends []vlog.Backend, network *vlog.Network, rollback []vlog.RollbackOp) *vlog.Log {
	heldLeases, leaseWait := r.leases.vlog() // with any that ended since
	vl := vlog.New(vlog.Session{
		ID: r.id, Agent: r.m.Agent.ID, ManifestPath: r.o.ManifestPath, ManifestBytes: r.o.ManifestData,
		Mode: r.mode, Start: ready.start, Backends: backends, Leases: heldLeases, LeaseWait: leaseWait, Container: r.ctr,
		Network: network, Canaries: canaryLog(ready.proc),
	})
	vl.LeaseStalls = r.leases.stallsLog()
	vl.AddRecords(s.eng.Records())
	vl.Recording = s.recording()
	// Another session's agent may have changed a file this one held: its
	// rollback said what it put back (notice.go).
	vl.Intrusions = takeNotices(r.o.noticeDir(), r.id)
	x := vlogExit(exit, s.killed, s.reason)
	if r.o.Container != nil && exit.Signal == 0 {
		x.Code = nil // a container's exit status is its runtime's, which reaps it
	}
	x.KilledAt = s.killedAt
	vl.Finish(time.Now(), x, rollback)
	r.tl.mark("log built")
	return vl
}

// finished tells a container's poststop hook the session is over. It
// waits for this, not for the backends' teardown: what the container held
// is free once the log is on disk (released again, harmlessly, when Run
// returns).
func (r *runner) finished(res *Result) {
	if r.o.Finished == nil || r.o.Container == nil {
		return
	}
	if r.leases != nil {
		r.leases.release()
	}
	r.tl.mark("leases released")
	r.o.Finished(res)
}

// learn writes the manifest a permissive run would need (Result.Learned).
func (r *runner) learn(s *running, res *Result) {
	if r.mode != policy.ModePermissive {
		return
	}
	if r.o.Container == nil {
		learnHostsFile(s.eng, hostsFile)
	}
	learned, err := s.eng.Learned(r.m, r.o.ManifestData)
	if err != nil {
		r.log.Warn("cannot write the learned manifest", "error", err)
		return
	}
	res.Learned = learned
}
