//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// AdoptRequest and EndRequest are the wire's: the OCI hook sends them
// from the light klock front.
type (
	AdoptRequest = wire.AdoptRequest
	EndRequest   = wire.EndRequest
)

// adopted is a container session, kept for a while after it ends so that
// the poststop hook that comes after the end still gets its result.
type adopted struct {
	id     string // the session's
	done   chan struct{}
	result *WireResult
	err    error
	ended  time.Time
}

// keepEnded bounds how long an ended container session's result waits for
// its poststop hook.
const keepEnded = 10 * time.Minute

// adoptTimeout bounds an adopt request (leases, backup, backends).
const adoptTimeout = 30 * time.Minute

// maxEndWait bounds an end request's wait.
const maxEndWait = 10 * time.Minute

// adopt serves an adopt request (AdoptRequest): it checks it, registers
// the container's session, starts it, and replies "started" once the
// session runs, or once its stage 2 is held for the session's release
// (armed), or the error that ended it first.
func (s *Server) adopt(c *net.UnixConn, w *connWriter, peer Peer, req *AdoptRequest) {
	received := time.Now()
	fail := func(err error) {
		s.log.Warn("adopt refused", "peer", peer.String(), "error", err)
		_ = w.send(errorMessage(err))
	}
	if err := checkAdoptRequest(peer, req); err != nil {
		fail(err)
		return
	}
	as := &adoptSession{req: req, received: received}
	var err error
	if as.backend, err = session.ParseBackend(req.Backend); err != nil {
		fail(fmt.Errorf("%w: %v", ErrBadRequest, err))
		return
	}
	if as.m, err = s.admit(req.ManifestPath, req.Manifest); err != nil {
		fail(err)
		return
	}
	mode := as.m.Mode
	if req.Mode != "" {
		mode = policy.Mode(req.Mode)
	}
	as.id = session.NewID(time.Now())
	id := as.id
	ad := &adopted{id: id, done: make(chan struct{})}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		fail(ErrShutdown)
		return
	}
	if old, ok := s.containers[req.ContainerID]; ok {
		select {
		case <-old.done:
		default:
			s.mu.Unlock()
			fail(fmt.Errorf("%w: container %s already has session %s", ErrBadRequest, req.ContainerID, old.id))
			return
		}
	}
	s.pruneEnded()
	s.containers[req.ContainerID] = ad
	ctx, cancel := context.WithCancelCause(s.ctx)
	info := SessionInfo{ID: id, Agent: as.m.Agent.ID, Mode: string(mode), Start: time.Now().UTC(), State: StateStarting, UID: peer.UID,
		Command: []string{"container " + req.ContainerID}, Container: req.ContainerID}
	s.sessions[id] = &live{info: info, owner: peer.UID, cancel: cancel}
	s.wg.Add(1)
	s.mu.Unlock()

	slg := s.log.With("session", id, "agent", as.m.Agent.ID, "container", req.ContainerID)
	slg.Info("container session starting", "pid", req.Pid, "mode", mode)
	started, armed := make(chan struct{}), make(chan struct{})
	opts := s.adoptOptions(as, slg, started)
	// The hook returns once the container is watched and walled, and its
	// stage 2 waits for the session's release (session.Options.Armed).
	opts.Armed = func() { close(armed) }
	finish := s.adoptFinisher(ad)
	// The poststop hook gets the result as soon as the log is written.
	opts.Finished = func(res *session.Result) { finish(res, nil) }
	if o := s.cfg.Observer; o != nil {
		o.SessionAdmitted(KindContainer)
	}
	go func() {
		defer s.wg.Done()
		defer cancel(nil)
		res, err := session.Run(ctx, opts)
		if o := s.cfg.Observer; o != nil {
			o.SessionEnded(KindContainer, mode, res, err)
		}
		finish(res, err)
		if res != nil {
			slg.Info("container session ended", "killed", res.Killed, "reason", res.Reason, "log", res.LogPath)
		} else {
			slg.Warn("container session did not start", "error", err)
		}
	}()
	select {
	case <-started:
	case <-armed:
	case <-ad.done:
		err := ad.err
		if err == nil {
			err = errors.New("the session ended before the container started")
		}
		fail(err)
		return
	}
	_ = w.send(msg(wire.Message{Type: typeStarted, Session: &info}))
}

// adoptSession is an admitted adopt request: what its session is built
// from.
type adoptSession struct {
	req     *AdoptRequest
	backend session.Backend
	m       *policy.Manifest
	id      string
	// received is when klockd read the request.
	received time.Time
}

// checkAdoptRequest refuses an adopt request from anyone but root (it names
// any process) and one without a usable container id and init pid.
func checkAdoptRequest(peer Peer, req *AdoptRequest) error {
	switch {
	case peer.UID != 0:
		return fmt.Errorf("%w: only root may hand klockd a container (uid %d asked)", ErrForbidden, peer.UID)
	case req == nil || req.ContainerID == "" || req.Pid <= 0:
		return fmt.Errorf("%w: an adopt request needs the container id and its init's pid", ErrBadRequest)
	case strings.ContainsAny(req.ContainerID, "/\x00"):
		return fmt.Errorf("%w: container id %q", ErrBadRequest, req.ContainerID)
	}
	return nil
}

// adoptOptions are the session options of an admitted adopt request: the
// container to wall, the daemon's shared backends and leases (root's), and
// the hook that marks it running in klock ps and closes started once.
func (s *Server) adoptOptions(as *adoptSession, slg *slog.Logger, started chan struct{}) session.Options {
	req, m, id := as.req, as.m, as.id
	var once sync.Once
	opts := session.Options{
		Manifest: m, ManifestPath: req.ManifestPath, ManifestData: req.Manifest, Mode: policy.Mode(req.Mode), ID: id,
		AllowDegraded: req.AllowDegraded, Backend: as.backend, Snapshot: s.cfg.Snapshot, Backends: s.shared,
		Leases: s.leases, LeaseTenant: "uid:0", Logger: slg, Stage2: s.cfg.Stage2,
		Events: s.sessionEvents(0),
		Container: &session.Container{ID: req.ContainerID, Pid: req.Pid, Cgroup: req.Cgroup, Mounts: logMounts(req.Mounts),
			WallFile: req.WallFile, Bundle: req.Bundle, UID: req.UID, GID: req.GID, Groups: req.Groups, Cwd: req.Cwd},
		NotEnforcing: s.notEnforcing(id),
		Started: func(pid int) {
			s.mu.Lock()
			if l := s.sessions[id]; l != nil {
				l.info.PID, l.info.State = pid, StateRunning
			}
			s.mu.Unlock()
			once.Do(func() {
				if o := s.cfg.Observer; o != nil {
					o.SessionRunning(KindContainer, time.Since(as.received))
				}
				close(started)
			})
		},
	}
	if opts.Snapshot == nil && !s.cfg.NoBackup {
		opts.Snapshot = session.Backup(nil)
	}
	if s.cfg.NoBackup {
		opts.Snapshot = nil
	}
	return opts
}

// adoptFinisher returns the function that records a container session's
// end, once: it leaves klock ps, and its result waits in ad for the
// poststop hook (end).
func (s *Server) adoptFinisher(ad *adopted) func(*session.Result, error) {
	var ended sync.Once
	return func(res *session.Result, err error) {
		ended.Do(func() {
			s.mu.Lock()
			delete(s.sessions, ad.id)
			if res != nil {
				ad.result = toWire(res, false)
				if err != nil {
					ad.result.Error = err.Error()
				}
			}
			ad.err, ad.ended = err, time.Now()
			s.mu.Unlock()
			close(ad.done)
		})
	}
}

// pruneEnded forgets ended container sessions whose poststop never came
// (s.mu held).
func (s *Server) pruneEnded() {
	for id, ad := range s.containers {
		select {
		case <-ad.done:
			if time.Since(ad.ended) > keepEnded {
				delete(s.containers, id)
			}
		default:
		}
	}
}

// end waits for a container's session to end and replies its result.
func (s *Server) end(w *connWriter, peer Peer, req *EndRequest) {
	if peer.UID != 0 {
		_ = w.send(errorMessage(fmt.Errorf("%w: only root may end a container's session", ErrForbidden)))
		return
	}
	if req == nil || req.ContainerID == "" {
		_ = w.send(errorMessage(fmt.Errorf("%w: an end request needs the container id", ErrBadRequest)))
		return
	}
	s.mu.Lock()
	ad, ok := s.containers[req.ContainerID]
	s.mu.Unlock()
	if !ok {
		_ = w.send(errorMessage(fmt.Errorf("%w: no session for container %q", ErrNoSession, req.ContainerID)))
		return
	}
	wait := req.Wait
	if wait <= 0 || wait > maxEndWait {
		wait = maxEndWait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ad.done:
	case <-t.C:
		_ = w.send(errorMessage(fmt.Errorf("%w: container %s's session %s has not ended after %s", ErrBadRequest, req.ContainerID, ad.id, wait)))
		return
	}
	s.mu.Lock()
	delete(s.containers, req.ContainerID)
	s.mu.Unlock()
	if ad.result == nil {
		_ = w.send(errorMessage(fmt.Errorf("container %s's session did not start: %v", req.ContainerID, ad.err)))
		return
	}
	_ = w.send(msg(wire.Message{Type: typeResult, Result: ad.result}))
}

// Adopt hands klockd a container (AdoptRequest) and returns once its
// session runs.
func (cl *Client) Adopt(req *AdoptRequest) (*SessionInfo, error) {
	// The backup of a large workdir takes its time: the runtime's own
	// hook timeout (if any) bounds it, not this one.
	r, err := cl.roundTripWithin(msg(wire.Message{Type: typeAdopt, Adopt: req}), adoptTimeout)
	if err != nil {
		return nil, err
	}
	if r.Type != typeStarted || r.Session == nil {
		return nil, fmt.Errorf("%w: reply %q to adopt", ErrProtocol, r.Type)
	}
	return r.Session, nil
}

// End waits up to wait for a container's session to end and returns its
// result.
func (cl *Client) End(containerID string, wait time.Duration) (*WireResult, error) {
	r, err := cl.roundTripWithin(msg(wire.Message{Type: typeEnd, End: &EndRequest{ContainerID: containerID, Wait: wait}}), wait+requestTimeout)
	if err != nil {
		return nil, err
	}
	if r.Type != typeResult || r.Result == nil {
		return nil, fmt.Errorf("%w: reply %q to end", ErrProtocol, r.Type)
	}
	return r.Result, nil
}

// logMounts is ms as the verification log records them.
func logMounts(ms []wire.Mount) []vlog.Mount {
	out := make([]vlog.Mount, len(ms))
	for i, m := range ms {
		out[i] = vlog.Mount{Container: m.Container, Host: m.Host}
	}
	return out
}
