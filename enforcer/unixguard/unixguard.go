//go:build linux

package unixguard

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/klocklabs/klock/enforcer/bpfprog"
	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/lsm"
	"github.com/klocklabs/klock/internal/backlog"
	"github.com/klocklabs/klock/internal/ringsync"
	"github.com/klocklabs/klock/policy"
)

// MaxSessions is the number of sessions one Guard holds at once (keep in
// step with UG_MAX_SESSIONS in bpf/unixguard.bpf.c).
const MaxSessions = 1024

// EventBuffer is how many events Session.Events holds for a consumer
// that lags: the first eventSlots in its channel, the rest in a backlog
// made only when it is used (internal/backlog).
const EventBuffer = 1024

// eventSlots is the channel's part of EventBuffer: a session that keeps
// up needs no more, and a channel of EventBuffer events (256 bytes each)
// was allocated and scanned by the collector for every session.
const eventSlots = 256

var (
	// ErrLoad wraps every failure to load the programs or create the maps:
	// on a kernel without the cgroup AF_UNIX hooks (before 6.7) the load
	// itself fails.
	ErrLoad = errors.New("unixguard: load cgroup AF_UNIX programs")
	// ErrAttach wraps every failure to give a session cgroup its wall.
	ErrAttach = errors.New("unixguard: attach to session cgroup")
	// ErrClosed is returned by operations on a closed Guard or Session.
	ErrClosed = errors.New("unixguard: closed")
)

// Guard holds the loaded programs and maps; one Guard serves many sessions.
type Guard struct {
	objs   unixguardObjects
	ring   *bpfprog.Ring
	logger *slog.Logger

	mu       sync.Mutex
	sessions map[uint64]*Session
	nextSess uint32
	closed   bool
}

// Load loads the programs and maps and starts the reader that turns
// refusals into events. It needs root (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON:
// the programs read the caller's working directory).
func Load() (*Guard, error) {
	g := &Guard{sessions: map[uint64]*Session{}, logger: slog.Default().With("backend", "cgroup-unix")}
	if err := bpfprog.Load(ErrLoad, func(opts *ebpf.CollectionOptions) error { return loadUnixguardObjects(&g.objs, opts) }); err != nil {
		return nil, err
	}
	ring, err := bpfprog.OpenRing(g.objs.UgEvents, ErrLoad, ringsync.WithPoll(lostPoll, g.pollLost))
	if err != nil {
		g.objs.Close()
		return nil, err
	}
	g.ring = ring
	ring.Read(g.handle, func(err error) { g.logger.Error("unixguard: read ring buffer", "err", err) })
	return g, nil
}

// Close closes every session still attached, stops the reader and unloads
// the programs.
func (g *Guard) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	var open []*Session
	for _, s := range g.sessions {
		open = append(open, s)
	}
	g.mu.Unlock()
	var errs []error
	for _, s := range open {
		errs = append(errs, s.Close())
	}
	errs = append(errs, g.ring.Close())
	errs = append(errs, g.objs.Close())
	return errors.Join(errs...)
}

// Session is one session cgroup behind the wall.
type Session struct {
	g      *Guard
	cg     *cgroup.Group
	links  []link.Link
	events *backlog.Queue[event.Event] // EventBuffer at most, eventSlots in a channel
	lost   chan event.Lost

	closeOnce sync.Once
	closeErr  error

	// guarded by g.mu
	sess   uint32    // the rules' id in ug_rules
	rules  lsm.Rules // what is written under sess
	closed bool
	losses bpfprog.Losses // not yet delivered on lost, and the kernel's counter
}

func (g *Guard) attachments() []struct {
	name string
	typ  ebpf.AttachType
	prog *ebpf.Program
} {
	return []struct {
		name string
		typ  ebpf.AttachType
		prog *ebpf.Program
	}{
		{"connect_unix", ebpf.AttachCgroupUnixConnect, g.objs.UgConnectUnix},
		{"sendmsg_unix", ebpf.AttachCgroupUnixSendmsg, g.objs.UgSendmsgUnix},
	}
}

// Attach writes rs's FILE rules for cg (compiled as bpf-lsm compiles them,
// lsm.CompileRules) and attaches both programs to cg. On error nothing
// stays attached or written. Start the agent only after Attach returns.
func (g *Guard) Attach(cg *cgroup.Group, rs *policy.Ruleset) (*Session, error) {
	rules, err := lsm.CompileRules(rs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAttach, err)
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, ErrClosed
	}
	if _, dup := g.sessions[cg.ID]; dup {
		g.mu.Unlock()
		return nil, fmt.Errorf("%w: cgroup %s already has a session", ErrAttach, cg.Path)
	}
	g.nextSess++
	s := &Session{g: g, cg: cg, sess: g.nextSess, events: backlog.New[event.Event](eventSlots, EventBuffer), lost: make(chan event.Lost, 16)}
	g.sessions[cg.ID] = s
	g.mu.Unlock()

	fail := func(err error) (*Session, error) {
		_ = s.Close()
		return nil, err
	}
	if err := rules.Write(g.objs.UgRules, s.sess); err != nil {
		rules.Delete(g.objs.UgRules, s.sess)
		return fail(fmt.Errorf("%w: %w", ErrAttach, err))
	}
	g.mu.Lock()
	s.rules = rules
	g.mu.Unlock()
	if err := g.objs.UgSessions.Update(cg.ID, unixguardUgSession{Sess: s.sess}, ebpf.UpdateNoExist); err != nil {
		return fail(fmt.Errorf("%w: cgroup %d (at most %d sessions): %w", ErrAttach, cg.ID, MaxSessions, err))
	}
	for _, a := range g.attachments() {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cg.Path, Attach: a.typ, Program: a.prog})
		if err != nil {
			return fail(fmt.Errorf("%w: %s to %s: %w", ErrAttach, a.name, cg.Path, err))
		}
		s.links = append(s.links, l)
	}
	return s, nil
}

// Update replaces the session's rules (permissive mode's amended scope):
// the new rules are written under a new id and switched to in one map
// update, so no call is decided by half of each. On error the old rules
// stay.
func (s *Session) Update(rs *policy.Ruleset) error {
	rules, err := lsm.CompileRules(rs)
	if err != nil {
		return fmt.Errorf("unixguard: update: %w", err)
	}
	g := s.g
	g.mu.Lock()
	if s.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.nextSess++
	sess := g.nextSess
	g.mu.Unlock()
	if err := rules.Write(g.objs.UgRules, sess); err != nil {
		rules.Delete(g.objs.UgRules, sess)
		return fmt.Errorf("unixguard: update: %w", err)
	}
	var val unixguardUgSession
	if err := g.objs.UgSessions.Lookup(s.cg.ID, &val); err != nil {
		rules.Delete(g.objs.UgRules, sess)
		return fmt.Errorf("unixguard: update: %w: %w", ErrClosed, err)
	}
	val.Sess = sess
	if err := g.objs.UgSessions.Update(s.cg.ID, val, ebpf.UpdateExist); err != nil {
		rules.Delete(g.objs.UgRules, sess)
		return fmt.Errorf("unixguard: update: switch rules of cgroup %d: %w", s.cg.ID, err)
	}
	g.mu.Lock()
	old, oldRules := s.sess, s.rules
	s.sess, s.rules = sess, rules
	g.mu.Unlock()
	return oldRules.Delete(g.objs.UgRules, old)
}

// Events delivers one event per refusal, in kernel order; closed by
// Close. A consumer EventBuffer events behind loses events, counted on
// Lost.
func (s *Session) Events() <-chan event.Event { return s.events.C() }

// Pending reports whether events wait to be read: in Events' channel, or
// on their way to it (a receive then returns one, soon).
func (s *Session) Pending() bool { return s.events.Pending() }

// Lost reports refusals whose record was not delivered (kernel ring
// buffer full, or Events full): the call was refused all the same. Strict
// mode must treat any value as fatal. Closed by Close.
func (s *Session) Lost() <-chan event.Lost { return s.lost }

// Close detaches both programs, then deletes the session's rules and
// entry, then closes Events and Lost. Idempotent; every call returns the
// first call's error.
func (s *Session) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.teardown() })
	return s.closeErr
}

func (s *Session) teardown() error {
	g := s.g
	var errs []error
	// Detach first: once the links are gone the programs no longer run
	// for this cgroup, so deleting the rules cannot turn into refusals.
	for _, l := range s.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("unixguard: detach from %s: %w", s.cg.Path, err))
		}
	}
	s.links = nil
	if err := g.objs.UgSessions.Delete(s.cg.ID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, fmt.Errorf("unixguard: delete session of cgroup %d: %w", s.cg.ID, err))
	}
	g.mu.Lock()
	sess, rules := s.sess, s.rules
	g.mu.Unlock()
	if err := rules.Delete(g.objs.UgRules, sess); err != nil {
		errs = append(errs, fmt.Errorf("unixguard: delete rules of cgroup %d: %w", s.cg.ID, err))
	}
	g.mu.Lock()
	if !s.closed {
		s.closed = true
		if g.sessions[s.cg.ID] == s {
			delete(g.sessions, s.cg.ID)
		}
		s.events.End()
		close(s.lost)
	}
	g.mu.Unlock()
	return errors.Join(errs...)
}

// Programs are the guard's loaded programs by name, for their run-time
// statistics (klockd --metrics-bpf-stats).
func (g *Guard) Programs() map[string]*ebpf.Program {
	return bpfprog.Programs(&g.objs.unixguardPrograms)
}
