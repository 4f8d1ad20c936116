//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/usock"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// Defaults (enforcer/daemon/wire's).
const (
	DefaultSocket = wire.DefaultSocket
	DefaultGroup  = wire.DefaultGroup
	// SocketEnv overrides DefaultSocket for clients (SocketPath).
	SocketEnv = wire.SocketEnv
)

// SocketPath is the socket clients use: $KLOCK_SOCKET, else DefaultSocket.
func SocketPath() string { return wire.SocketPath() }

// requestTimeout bounds how long a connection may take to send its request.
const requestTimeout = 30 * time.Second

// Config configures a Server.
type Config struct {
	// Socket is the unix socket path (default DefaultSocket).
	Socket string
	// Group names the group whose members may create sessions besides root
	// (default DefaultGroup). When no such group exists only root may.
	Group string
	// SocketMode is the socket file's mode (default 0660, group Group).
	SocketMode os.FileMode
	// DirMode is the mode of the socket's directory when Listen creates it
	// (default 0750, group Group). An existing directory is left as it is.
	DirMode os.FileMode
	// Listener, when set, is the socket to serve, already listening (klockd
	// under systemd socket activation: the .socket unit made it, with its
	// own SocketMode and SocketGroup). Listen then creates no socket, and
	// Shutdown closes it but leaves its file, which is its maker's; Socket,
	// SocketMode and DirMode are unused.
	Listener *net.UnixListener
	// Backends are the kernel backends sessions share; nil makes Listen
	// load them (and Shutdown unload them).
	Backends *session.Shared
	// Observe configures the observer Listen loads when Backends is nil.
	// A zero SyscallLinger is DefaultSyscallLinger (negative: none).
	Observe observe.Options
	// Snapshot takes every session's pre-flight backup (see
	// session.Options.Snapshot). nil is what klock run does embedded:
	// session.Backup, its progress on the client's stderr.
	Snapshot session.Snapshotter
	// NoBackup runs sessions without a pre-flight backup (strict sessions
	// then refuse unless the client allows degraded enforcement).
	NoBackup bool
	// Logger receives the daemon's log (default slog.Default()).
	Logger *slog.Logger
	// Stage2 is every session's launcher binary (session.Options.Stage2):
	// "" means klock-stage2 beside klockd's executable.
	Stage2 string
	// Admit, when set, decides whether a run request's manifest may run
	// at all (klockd --require-signed: signed by a trusted key); its error
	// is the client's refusal. The client's own check does not replace
	// it: a group member can send klockd any bytes.
	Admit func(*policy.Manifest) error
	// Leases is the lease store klockd's sessions and its lease API
	// (enforcer/leaseapi) share: nil is the host's (session.HostLeases),
	// shared with embedded klock runs.
	Leases lease.Store
	// Observer, when set, is told of every session klockd runs (klockd
	// --metrics-listen: package enforcer/metrics).
	Observer Observer
	// Events is the hub every session's event records go to, and klock
	// events reads (nil: Listen makes one).
	Events *eventlog.Hub
	// EventsFile, when set, is written every record (klockd
	// --events-file) until Shutdown, which closes it.
	EventsFile *eventlog.File
	// EventSinks are told every record klockd publishes, beside Events,
	// as it is published: a sink must not block (klockd --metrics-listen:
	// the guard's records that gateways publish move its metrics).
	EventSinks []eventlog.Sink
}

// Observer watches the sessions klockd runs; its methods must not block.
// kind is KindRun or KindContainer.
type Observer interface {
	// SessionAdmitted: a run or adopt request was admitted; SessionEnded
	// follows.
	SessionAdmitted(kind string)
	// SessionRunning: the agent runs, sinceRequest after its request.
	SessionRunning(kind string, sinceRequest time.Duration)
	// SessionEnded: what session.Run returned.
	SessionEnded(kind string, mode policy.Mode, res *session.Result, err error)
}

// The kinds of session an Observer is told of.
const (
	// KindRun: klock run's, through klockd's socket.
	KindRun = "run"
	// KindContainer: a container klockd adopted (klock-runtime, klock
	// oci-hook).
	KindContainer = "container"
)

// DefaultSyscallLinger is how long klockd keeps the syscall tracepoint
// programs attached after the last Landlock session that needs them ends,
// so that a burst of sessions pays their attach once (see
// observe.Options.SyscallLinger).
const DefaultSyscallLinger = 5 * time.Second

// Server is klockd: it holds the kernel backends and serves sessions on a
// unix socket. See the package documentation.
type Server struct {
	cfg       Config
	log       *slog.Logger
	ln        *net.UnixListener
	socket    string
	gid       uint32
	hasGroup  bool
	shared    *session.Shared
	ownShared bool
	leases    lease.Store
	events    *eventlog.Hub
	// sink is where klockd publishes: events and Config.EventSinks.
	sink eventlog.Sink
	// eventsFile reads for Config.EventsFile; eventsDone is closed when
	// the file has written its last record (nil without one).
	eventsFile *eventlog.Reader
	eventsDone chan struct{}

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	sessions map[string]*live
	// containers are the container sessions by container id (adopt).
	containers map[string]*adopted
	conns      map[*net.UnixConn]bool // true: serving a run
	closing    bool
	wg         sync.WaitGroup
	serveErr   chan error
}

// live is one session klockd runs.
type live struct {
	info   SessionInfo
	owner  uint32
	cancel context.CancelCauseFunc
	// traffic reads the session's bytes out and in (session.Options.Traffic).
	traffic func() (out, in uint64)
}

// Listen creates the socket (and its directory, when missing), loads the
// shared backends unless cfg.Backends is set, and returns a Server ready
// to Serve.
func Listen(cfg Config) (*Server, error) {
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket
	}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup
	}
	if cfg.SocketMode == 0 {
		cfg.SocketMode = 0o660
	}
	if cfg.DirMode == 0 {
		cfg.DirMode = 0o750
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, socket: cfg.Socket, sessions: map[string]*live{}, containers: map[string]*adopted{},
		conns: map[*net.UnixConn]bool{}, serveErr: make(chan error, 1)}
	owner := usock.LookupGroup(cfg.Group)
	s.gid, s.hasGroup = owner.GID, owner.HasGroup
	if !s.hasGroup {
		log.Info("no such group: only root may create sessions", "group", cfg.Group)
	}
	// Sessions need cgroup v2: refuse to start without it.
	if _, err := cgroup.Mountpoint(); err != nil {
		return nil, err
	}

	ln, err := listen(cfg, owner)
	if err != nil {
		return nil, err
	}
	s.ln = ln
	if cfg.Listener != nil {
		s.socket = ln.Addr().String()
	}
	s.leases = cfg.Leases
	if s.leases == nil {
		// The host's store is never closed: the process shares it.
		if s.leases, err = session.HostLeases(); err != nil {
			ln.Close()
			return nil, fmt.Errorf("klockd: the host's lease store: %w", err)
		}
	}
	s.startEvents()

	s.shared = cfg.Backends
	if s.shared == nil {
		obs := cfg.Observe
		if obs.SyscallLinger == 0 {
			obs.SyscallLinger = DefaultSyscallLinger
		}
		s.shared, s.ownShared = session.LoadShared(obs), true
		if s.shared.ObserverErr != nil {
			log.Warn("observation backend unavailable: sessions degrade or refuse", "error", s.shared.ObserverErr)
		}
		if s.shared.GuardErr != nil {
			log.Warn("network backend unavailable: sessions degrade or refuse", "error", s.shared.GuardErr)
		}
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	return s, nil
}

// listen is cfg.Listener, else a new socket at cfg.Socket.
func listen(cfg Config, owner usock.Owner) (*net.UnixListener, error) {
	if cfg.Listener != nil {
		return cfg.Listener, nil
	}
	ln, err := usock.Listen(cfg.Socket, cfg.SocketMode, cfg.DirMode, owner)
	if errors.Is(err, usock.ErrInUse) {
		return nil, fmt.Errorf("klockd: another klockd is listening on %s", cfg.Socket)
	}
	if err != nil {
		return nil, fmt.Errorf("klockd: %w", err)
	}
	return ln, nil
}

// Leases is the lease store klockd serves (Config.Leases).
func (s *Server) Leases() lease.Store { return s.leases }

// Addr is the socket path.
func (s *Server) Addr() string { return s.socket }

// Backends are the shared kernel backends sessions use.
func (s *Server) Backends() *session.Shared { return s.shared }

// Serve accepts connections until Shutdown; it then returns nil.
func (s *Server) Serve() error {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("klockd: accept: %w", err)
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.conns[c] = false
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.handle(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// Shutdown stops accepting, kills every running session (each ends as
// killed, with its rollback and verification log, and its client gets the
// result), waits for them within ctx, unloads the backends it loaded and
// removes the socket (one given as Config.Listener stays: its maker's).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	for _, l := range s.sessions {
		l.info.State = StateKilling
		l.cancel(fmt.Errorf("%w: klockd received a shutdown request", ErrShutdown))
	}
	for c, running := range s.conns {
		if !running {
			c.Close()
		}
	}
	s.mu.Unlock()
	s.cancel(ErrShutdown)
	err := s.ln.Close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("klockd: shutdown: sessions still ending: %w", ctx.Err())
	}
	if s.ownShared {
		err = errors.Join(err, s.shared.Close())
	}
	s.stopEvents()
	if s.cfg.Listener != nil {
		return err // the socket's file is its maker's (systemd's)
	}
	if rerr := os.Remove(s.socket); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// Sessions lists the running sessions.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	out := make([]SessionInfo, 0, len(s.sessions))
	var reads []func() (uint64, uint64)
	for _, l := range s.sessions {
		out = append(out, l.info)
		reads = append(reads, l.traffic)
	}
	s.mu.Unlock()
	// The wall's counters are read outside the lock (a netlink dump each).
	for i, read := range reads {
		if read != nil {
			o, in := read()
			out[i].Network = &Traffic{OutBytes: o, InBytes: in}
		}
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// authorize is the check every connection passes before its request is
// read.
func (s *Server) authorize(p Peer) error {
	if usock.InSessionCgroup(p.Cgroup) {
		return fmt.Errorf("%w: %v (%s)", ErrForbidden, usock.ErrInSession, p)
	}
	if p.UID == 0 || (s.hasGroup && p.InGroup(s.gid)) {
		return nil
	}
	if s.hasGroup {
		return fmt.Errorf("%w: uid %d is neither root nor a member of group %q", ErrForbidden, p.UID, s.cfg.Group)
	}
	return fmt.Errorf("%w: uid %d is not root (group %q does not exist, so only root may use klockd)", ErrForbidden, p.UID, s.cfg.Group)
}

func (s *Server) handle(c *net.UnixConn) {
	w := &connWriter{c: c}
	peer, err := usock.PeerOf(c)
	if err == nil {
		err = s.authorize(peer)
	} else {
		err = fmt.Errorf("%w: cannot verify the peer: %v", ErrForbidden, err)
	}
	if err != nil {
		s.log.Warn("refused a connection", "peer", peer.String(), "error", err)
		_ = w.send(errorMessage(err))
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(requestTimeout))
	m, files, err := readFrame(c, maxRequestFrame)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			_ = w.send(errorMessage(fmt.Errorf("%w: %v", ErrBadRequest, err)))
		}
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if m.Type != typeRun {
		closeAll(files)
	}
	if m.V != ProtocolVersion {
		closeAll(files)
		_ = w.send(errorMessage(fmt.Errorf("%w: protocol version %d, klockd speaks %d", ErrBadRequest, m.V, ProtocolVersion)))
		return
	}
	switch m.Type {
	case typeRun:
		s.run(c, w, peer, m.Run, files)
	case typePS:
		list := s.Sessions()
		if peer.UID != 0 {
			list = slices.DeleteFunc(list, func(i SessionInfo) bool { return i.UID != peer.UID })
		}
		_ = w.send(msg(wire.Message{Type: typeSessions, Sessions: list}))
	case typeAdopt:
		s.adopt(c, w, peer, m.Adopt)
	case typeEnd:
		s.end(w, peer, m.End)
	case typeEvents:
		s.streamEvents(w, peer, m.Events)
	case typePublish:
		s.publish(c, peer, m)
	case typeKill:
		if err := s.kill(peer, m.ID); err != nil {
			_ = w.send(errorMessage(err))
			return
		}
		s.log.Info("session killed on request", "session", m.ID, "peer", peer.String())
		_ = w.send(msg(wire.Message{Type: typeKilled, ID: m.ID}))
	default:
		_ = w.send(errorMessage(fmt.Errorf("%w: unknown request type %q", ErrBadRequest, m.Type)))
	}
}

// kill ends a session: its context is cancelled with the reason, so
// session.Run kills the cgroup, rolls back and writes the log as for any
// kill, and the run's client gets a Killed result.
func (s *Server) kill(peer Peer, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.sessions[id]
	if ad, isCtr := s.containers[id]; !ok && isCtr {
		l, ok = s.sessions[ad.id] // a container's id names its session
	}
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoSession, id)
	}
	if peer.UID != 0 && l.owner != peer.UID {
		return fmt.Errorf("%w: session %s belongs to uid %d", ErrForbidden, id, l.owner)
	}
	l.info.State = StateKilling
	l.cancel(fmt.Errorf("killed by klock kill (uid %d, pid %d)", peer.UID, peer.PID))
	return nil
}

// credential decides who the agent runs as. Root may name anyone (uid 0
// only with AllowRoot, as in the embedded path). A klock-group member may
// run agents only as itself, with its own groups, in a workdir (and log
// dir) it owns: klockd writes there as root.
func (s *Server) credential(peer Peer, req *RunRequest, m *policy.Manifest) (*launch.Credential, error) {
	if req.DefaultUser {
		c, err := launch.DefaultUserOf(m.Workdir, req.SudoUID, req.SudoGID)
		if err != nil {
			return nil, err
		}
		req.UID, req.GID, req.Groups, req.AllowRoot = c.UID, c.GID, nil, false
	}
	cred := &launch.Credential{UID: req.UID, GID: req.GID, Groups: req.Groups, AllowRoot: req.AllowRoot}
	if peer.UID == 0 {
		return cred, nil
	}
	if req.UID != peer.UID || req.AllowRoot {
		return nil, fmt.Errorf("%w: uid %d may run agents only as itself, not as uid %d (ask root to run it: sudo klock run)", ErrForbidden, peer.UID, req.UID)
	}
	for _, g := range append([]uint32{req.GID}, req.Groups...) {
		if !peer.InGroup(g) {
			return nil, fmt.Errorf("%w: uid %d is not in group %d", ErrForbidden, peer.UID, g)
		}
	}
	for _, dir := range []string{m.Workdir, req.LogDir} {
		if dir == "" {
			continue
		}
		st, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Uid != peer.UID {
			return nil, fmt.Errorf("%w: %s is not owned by uid %d: klockd writes klock's state there as root, so only its owner's sessions may use it", ErrForbidden, dir, peer.UID)
		}
	}
	return cred, nil
}

// run serves a run request: it checks the request, registers the session
// (klock ps lists it), runs it with the client's stdio and logging
// forwarded, and replies its result. The session ends when the agent does,
// or when the client cancels or goes away.
func (s *Server) run(c *net.UnixConn, w *connWriter, peer Peer, req *RunRequest, files []*os.File) {
	defer closeAll(files)
	received := time.Now()
	fail := func(err error) {
		s.log.Warn("run refused", "peer", peer.String(), "error", err)
		_ = w.send(errorMessage(err))
	}
	if req == nil || len(req.Argv) == 0 {
		fail(fmt.Errorf("%w: a run request needs argv", ErrBadRequest))
		return
	}
	rs := &runSession{req: req, peer: peer}
	var err error
	if rs.backend, err = session.ParseBackend(req.Backend); err != nil {
		fail(fmt.Errorf("%w: %v", ErrBadRequest, err))
		return
	}
	if rs.stdio, err = stdioFiles(req.Stdio, files); err != nil {
		fail(err)
		return
	}
	if rs.m, err = s.admit(req.ManifestPath, req.Manifest); err != nil {
		fail(err)
		return
	}
	if rs.cred, err = s.credential(peer, req, rs.m); err != nil {
		fail(err)
		return
	}
	mode := rs.m.Mode
	if req.Mode != "" {
		mode = policy.Mode(req.Mode)
	}
	rs.id, rs.received = session.NewID(time.Now()), received
	id := rs.id
	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	info := SessionInfo{ID: id, Agent: rs.m.Agent.ID, Mode: string(mode), Start: time.Now().UTC(), State: StateStarting, UID: peer.UID, Command: req.Argv}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		fail(ErrShutdown)
		return
	}
	s.sessions[id] = &live{info: info, owner: peer.UID, cancel: cancel}
	s.conns[c] = true
	s.mu.Unlock()
	unregister := func() {
		s.mu.Lock()
		delete(s.sessions, id)
		s.mu.Unlock()
	}
	defer unregister()
	slg := s.log.With("session", id, "agent", rs.m.Agent.ID)
	slg.Info("session starting", "peer", peer.String(), "argv", req.Argv, "uid", rs.cred.UID, "mode", mode)
	_ = w.send(msg(wire.Message{Type: typeStarted, Session: &info}))
	go watchClient(c, cancel)

	fwd := newForwarder(w)
	defer fwd.close()
	if o := s.cfg.Observer; o != nil {
		o.SessionAdmitted(KindRun)
	}
	res, err := session.Run(ctx, s.runOptions(rs, slg, fwd))
	if o := s.cfg.Observer; o != nil {
		o.SessionEnded(KindRun, mode, res, err)
	}
	unregister() // before the reply: a client that gets its result no longer sees it in ps
	fwd.close()
	if err != nil && res == nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (the session was ended before the agent started: %v)", err, cause)
		}
		slg.Warn("session did not start", "error", err)
		_ = w.send(errorMessage(err))
		return
	}
	wr := toWire(res, req.Learn)
	if req.Summary {
		withSummary(wr, res)
	}
	if err != nil {
		wr.Error = err.Error()
	}
	slg.Info("session ended", "exit", res.Exit.String(), "killed", res.Killed, "reason", res.Reason, "log", res.LogPath)
	_ = c.SetWriteDeadline(time.Now().Add(requestTimeout))
	_ = w.send(msg(wire.Message{Type: typeResult, Result: wr}))
}

// runSession is an admitted run request: what its session is built from.
type runSession struct {
	req     *RunRequest
	peer    Peer
	backend session.Backend
	stdio   [3]*os.File // by descriptor number; nil where the client attached none
	m       *policy.Manifest
	cred    *launch.Credential
	id      string
	// received is when klockd read the request.
	received time.Time
}

// stdioFiles places the descriptors the client attached at the stdio
// numbers the request names for them, each at most once.
func stdioFiles(names []int, files []*os.File) ([3]*os.File, error) {
	var stdio [3]*os.File
	if len(names) != len(files) {
		return stdio, fmt.Errorf("%w: %d descriptors attached, stdio names %d", ErrBadRequest, len(files), len(names))
	}
	for i, n := range names {
		if n < 0 || n > 2 || stdio[n] != nil {
			return stdio, fmt.Errorf("%w: stdio %v", ErrBadRequest, names)
		}
		stdio[n] = files[i]
	}
	return stdio, nil
}

// watchClient reads the connection until the client ends its session,
// by sending cancel (klock run got SIGINT or SIGTERM) or by going away.
func watchClient(c *net.UnixConn, cancel context.CancelCauseFunc) {
	for {
		m, fs, err := readFrame(c, 4096)
		closeAll(fs)
		if err != nil {
			cancel(errors.New("the klock client disconnected"))
			return
		}
		if m.Type == typeCancel {
			reason := "the klock client was interrupted"
			if m.Reason != "" {
				reason = m.Reason
			}
			cancel(errors.New(reason))
		}
	}
}

// runOptions are the session options of an admitted run request: its
// manifest, command and credential, the daemon's shared backends and
// leases (the client's uid is the leases' tenant), the client's stdio, its
// log forwarded to the client, and the hooks that keep klock ps current.
func (s *Server) runOptions(rs *runSession, slg *slog.Logger, fwd *forwarder) session.Options {
	req, id, stdio := rs.req, rs.id, rs.stdio
	snap := s.cfg.Snapshot
	if snap == nil && !s.cfg.NoBackup {
		var progress io.Writer // a nil *os.File must not become a non-nil Writer
		if stdio[2] != nil {
			progress = stdio[2]
		}
		snap = session.Backup(progress)
	}
	if s.cfg.NoBackup {
		snap = nil
	}
	opts := session.Options{
		Manifest: rs.m, ManifestPath: req.ManifestPath, ManifestData: req.Manifest, Mode: policy.Mode(req.Mode), ID: id,
		Command: req.Argv, Env: req.Env, Dir: req.Dir, User: rs.cred, AllowDegraded: req.AllowDegraded, Backend: rs.backend,
		RollbackOnInterrupt: req.RollbackOnInterrupt, KeepTmp: req.KeepTmp, RecordAll: req.RecordAll,
		Snapshot: snap, LogDir: req.LogDir, Backends: s.shared, Stage2: s.cfg.Stage2,
		// The client's uid is the leases' tenant (klock leases shows each
		// uid its own).
		Leases: s.leases, LeaseTenant: fmt.Sprintf("uid:%d", rs.peer.UID),
		LeaseWait: req.LeaseWait, LeaseTTL: req.LeaseTTL, LeaseGrace: req.LeaseGrace, LeaseGroup: req.LeaseGroup,
		Logger: newLogger(slg.Handler(), fwd), Events: s.sessionEvents(rs.peer.UID),
		// ps shows "running" only once launch has handed over the agent.
		Started: func(pid int) {
			s.mu.Lock()
			if l := s.sessions[id]; l != nil {
				l.info.PID, l.info.State = pid, StateRunning
			}
			s.mu.Unlock()
			if o := s.cfg.Observer; o != nil {
				o.SessionRunning(KindRun, time.Since(rs.received))
			}
		},
		Traffic: func(read func() (uint64, uint64)) {
			s.mu.Lock()
			if l := s.sessions[id]; l != nil {
				l.traffic = read
			}
			s.mu.Unlock()
		},
		LeaseStall:   s.leaseStall(id),
		NotEnforcing: s.notEnforcing(id),
	}
	// Assign only real files: a nil *os.File in an io.Reader is not nil.
	if stdio[0] != nil {
		opts.Stdin = stdio[0]
	}
	if stdio[1] != nil {
		opts.Stdout = stdio[1]
	}
	if stdio[2] != nil {
		opts.Stderr = stdio[2]
	}
	return opts
}

// connWriter serializes frames written to one connection.
type connWriter struct {
	mu sync.Mutex
	c  *net.UnixConn
}

func (w *connWriter) send(m *message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return writeFrame(w.c, m)
}

// admit parses a request's manifest and asks Config.Admit whether it may
// run at all (klockd --require-signed).
func (s *Server) admit(path string, data []byte) (*policy.Manifest, error) {
	m, err := policy.Parse(path, data)
	if err != nil {
		return nil, err
	}
	if s.cfg.Admit != nil {
		if err := s.cfg.Admit(m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// leaseStall keeps session id's SessionInfo.LeaseStall current.
func (s *Server) leaseStall(id string) func(vlog.LeaseStall) {
	return func(st vlog.LeaseStall) {
		s.mu.Lock()
		defer s.mu.Unlock()
		l := s.sessions[id]
		if l == nil {
			return
		}
		l.info.LeaseStall = nil
		if st.To.IsZero() {
			l.info.LeaseStall = &LeaseStall{Since: st.From, Frozen: st.Frozen, Why: st.Why}
		}
	}
}

// notEnforcing records, for klock ps, the walls that let session id's
// canary through (session.Options.NotEnforcing).
func (s *Server) notEnforcing(id string) func(walls []string) {
	return func(walls []string) {
		s.mu.Lock()
		if l := s.sessions[id]; l != nil {
			l.info.NotEnforcing = walls
		}
		s.mu.Unlock()
	}
}
