//go:build linux

package netguard

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
	"github.com/klocklabs/klock/internal/backlog"
	"github.com/klocklabs/klock/internal/ringsync"
	"github.com/klocklabs/klock/policy"
)

// Limits compiled into bpf/netguard.bpf.c (keep in step).
const (
	// MaxRules is the number of address rules one session can hold, after
	// host names are resolved and identical rules are merged.
	MaxRules = 256
	// MaxSessions is the number of sessions one Guard can hold at once.
	MaxSessions = 1024
)

// Values shared with bpf/netguard.bpf.c.
const (
	accConnect = 1 // CONSUMES: connect, sendto/sendmsg
	accBind    = 2 // PROVIDES: bind
	flagRaw    = 1 // NET:raw declared
	flagReport = 2 // report allowed operations too

	afInet   = 2
	afInet6  = 10
	afPacket = 17

	hookConnect4   = 1
	hookConnect6   = 2
	hookSendmsg4   = 3
	hookSendmsg6   = 4
	hookBind4      = 5
	hookBind6      = 6
	hookSockCreate = 7
)

var (
	// ErrLoad wraps every failure to load the programs or create the maps.
	ErrLoad = errors.New("netguard: load cgroup-net programs")
	// ErrAttach wraps every failure to attach to a session cgroup.
	ErrAttach = errors.New("netguard: attach to session cgroup")
	// ErrUnresolved means the ruleset still holds a host name without its
	// addresses: call policy.Ruleset.Resolve first. The wall never treats a
	// name it cannot see as "no rule" nor as "anything".
	ErrUnresolved = errors.New("netguard: ruleset has an unresolved host name")
	// ErrTooManyRules means a session's rules do not fit the kernel map.
	ErrTooManyRules = errors.New("netguard: too many network rules")
	// ErrClosed is returned by operations on a closed Guard or Session.
	ErrClosed = errors.New("netguard: closed")
)

// UnresolvedError names the host that was not resolved and the intent that
// declared it. errors.Is(err, ErrUnresolved) holds.
type UnresolvedError struct {
	Host   string
	Intent string
}

func (e *UnresolvedError) Error() string {
	return fmt.Sprintf("netguard: host %s (from %s) has no resolved addresses; resolve the ruleset (policy.Ruleset.Resolve) before attaching", e.Host, e.Intent)
}

// Unwrap makes errors.Is(err, ErrUnresolved) hold.
func (e *UnresolvedError) Unwrap() error { return ErrUnresolved }

// TooManyRulesError says which intent's rule did not fit.
// errors.Is(err, ErrTooManyRules) holds.
type TooManyRulesError struct {
	Limit  int    // MaxRules
	Intent string // the intent whose rule was the first that did not fit
	Rule   string // that rule's pattern (an address when it came from a host name)
}

func (e *TooManyRulesError) Error() string {
	return fmt.Sprintf("netguard: the session needs more than %d network rules (after resolving host names and merging duplicates); %s (from %s) does not fit: merge addresses into CIDRs or port ranges",
		e.Limit, e.Rule, e.Intent)
}

// Unwrap makes errors.Is(err, ErrTooManyRules) hold.
func (e *TooManyRulesError) Unwrap() error { return ErrTooManyRules }

// Guard holds the loaded programs and maps; one Guard serves many sessions.
type Guard struct {
	objs   netguardObjects
	ring   *bpfprog.Ring
	logger *slog.Logger

	mu       sync.Mutex
	sessions map[uint64]*Session
	closed   bool
	orphans  uint64 // denials for cgroups with no session (torn down, or never attached)
}

// Load loads the programs and maps into the kernel and starts the reader
// that turns denials into events. It needs CAP_BPF and CAP_NET_ADMIN (root).
func Load() (*Guard, error) {
	g := &Guard{sessions: map[uint64]*Session{}, logger: slog.Default().With("backend", "cgroup-net")}
	if err := bpfprog.Load(ErrLoad, func(opts *ebpf.CollectionOptions) error { return loadNetguardObjects(&g.objs, opts) }); err != nil {
		return nil, err
	}
	ring, err := bpfprog.OpenRing(g.objs.NgEvents, ErrLoad, ringsync.WithPoll(lostPoll, g.pollLost))
	if err != nil {
		g.objs.Close()
		return nil, err
	}
	g.ring = ring
	ring.Read(g.handle, func(err error) { g.logger.Error("netguard: read ring buffer", "err", err) })
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
	g.closed = true // no Attach from here on
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

// Orphans counts denials whose cgroup had no session when user space read
// them (a session closed meanwhile, or a socket of a session cgroup used
// from a process outside it).
func (g *Guard) Orphans() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.orphans
}

// Session is one session cgroup under the wall.
type Session struct {
	g      *Guard
	cg     *cgroup.Group
	id     uint64
	links  []link.Link
	events *backlog.Queue[event.Event] // EventBuffer at most, eventSlots in a channel
	lost   chan event.Lost

	flags uint32 // policy flags every rules update keeps (flagReport)

	closeOnce sync.Once
	closeErr  error

	// guarded by g.mu
	closed bool
	losses bpfprog.Losses // not yet delivered on lost, and the kernel's counter
}

// EventBuffer is how many events Session.Events holds for a consumer
// that lags: the first eventSlots in its channel, the rest in a backlog
// made only when it is used (internal/backlog).
const EventBuffer = 4096

// eventSlots is the channel's part of EventBuffer: a session that keeps
// up needs no more, and a channel of EventBuffer events (256 bytes each)
// was allocated and scanned by the collector for every session.
const eventSlots = 256

var attachTypes = []struct {
	name string
	typ  ebpf.AttachType
}{
	{"connect4", ebpf.AttachCGroupInet4Connect},
	{"connect6", ebpf.AttachCGroupInet6Connect},
	{"sendmsg4", ebpf.AttachCGroupUDP4Sendmsg},
	{"sendmsg6", ebpf.AttachCGroupUDP6Sendmsg},
	{"bind4", ebpf.AttachCGroupInet4Bind},
	{"bind6", ebpf.AttachCGroupInet6Bind},
	{"sock_create", ebpf.AttachCGroupInetSockCreate},
}

func (g *Guard) programs() []*ebpf.Program {
	p := &g.objs.netguardPrograms
	return []*ebpf.Program{p.NgConnect4, p.NgConnect6, p.NgSendmsg4, p.NgSendmsg6, p.NgBind4, p.NgBind6, p.NgSockCreate}
}

// Attach writes rs's NET rules for cg and attaches every program to cg.
// rs must be resolved (policy.Ruleset.Resolve); a host name without
// addresses is refused with an *UnresolvedError, a ruleset larger than
// MaxRules with a *TooManyRulesError. On error nothing stays attached and
// no map entry stays written. Start the agent only after Attach returns.
func (g *Guard) Attach(cg *cgroup.Group, rs *policy.Ruleset, opts ...AttachOption) (*Session, error) {
	var ao attachOpts
	for _, o := range opts {
		o(&ao)
	}
	pol, err := compile(rs)
	if err != nil {
		return nil, err
	}
	pol.Flags |= ao.flags
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, ErrClosed
	}
	if _, dup := g.sessions[cg.ID]; dup {
		g.mu.Unlock()
		return nil, fmt.Errorf("%w: cgroup %s already has a session", ErrAttach, cg.Path)
	}
	s := &Session{g: g, cg: cg, id: cg.ID, events: backlog.New[event.Event](eventSlots, EventBuffer), lost: make(chan event.Lost, 16), flags: ao.flags}
	g.sessions[cg.ID] = s
	g.mu.Unlock()

	fail := func(err error) (*Session, error) {
		_ = s.Close()
		return nil, err
	}
	var zero uint64
	if err := g.objs.NgLost.Update(cg.ID, zero, ebpf.UpdateAny); err != nil {
		return fail(fmt.Errorf("%w: reset loss counter: %w", ErrAttach, err))
	}
	if err := g.objs.NgPolicies.Update(cg.ID, pol, ebpf.UpdateNoExist); err != nil {
		return fail(fmt.Errorf("%w: write rules for cgroup %d (at most %d sessions): %w", ErrAttach, cg.ID, MaxSessions, err))
	}
	for i, prog := range g.programs() {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cg.Path, Attach: attachTypes[i].typ, Program: prog})
		if err != nil {
			return fail(fmt.Errorf("%w: %s to %s: %w", ErrAttach, attachTypes[i].name, cg.Path, err))
		}
		s.links = append(s.links, l)
	}
	return s, nil
}

// Update replaces the session's rules (permissive mode's amended scope).
// The same checks as Attach apply; on error the old rules stay.
func (s *Session) Update(rs *policy.Ruleset) error {
	pol, err := compile(rs)
	if err != nil {
		return err
	}
	pol.Flags |= s.flags
	s.g.mu.Lock()
	closed := s.closed
	s.g.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err := s.g.objs.NgPolicies.Update(s.id, pol, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("netguard: update rules for cgroup %d: %w", s.id, err)
	}
	return nil
}

// CgroupID is the session cgroup's id.
func (s *Session) CgroupID() uint64 { return s.id }

// Events delivers one event per denial (and, with ReportAllowed, per
// allowed operation), in kernel order. It is closed by
// Close. A consumer that falls EventBuffer events behind loses events; they
// are counted on Lost.
func (s *Session) Events() <-chan event.Event { return s.events.C() }

// Pending reports whether events wait to be read: in Events' channel, or
// on their way to it (a receive then returns one, soon).
func (s *Session) Pending() bool { return s.events.Pending() }

// Lost reports events that were not delivered (ring buffer full in the
// kernel, or Events full): the denial still happened, its record is gone.
// Strict mode must treat any value as fatal. Closed by Close.
func (s *Session) Lost() <-chan event.Lost { return s.lost }

// Close detaches every program from the session cgroup, then deletes its
// map entries, then closes Events and Lost. It is idempotent and safe to
// call concurrently; every call returns the first call's error.
func (s *Session) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.teardown() })
	return s.closeErr
}

func (s *Session) teardown() error {
	var errs []error
	// Detach first: once the links are gone the programs no longer run for
	// this cgroup, so deleting the rules cannot turn into denials.
	for _, l := range s.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("netguard: detach from %s: %w", s.cg.Path, err))
		}
	}
	s.links = nil
	if err := s.g.objs.NgPolicies.Delete(s.id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, fmt.Errorf("netguard: delete rules of cgroup %d: %w", s.id, err))
	}
	if err := s.g.objs.NgLost.Delete(s.id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, fmt.Errorf("netguard: delete loss counter of cgroup %d: %w", s.id, err))
	}
	s.g.mu.Lock()
	if !s.closed {
		s.closed = true
		if s.g.sessions[s.id] == s {
			delete(s.g.sessions, s.id)
		}
		s.events.End()
		close(s.lost)
	}
	s.g.mu.Unlock()
	return errors.Join(errs...)
}

// Programs are the guard's loaded programs by name, for their run-time
// statistics (klockd --metrics-bpf-stats).
func (g *Guard) Programs() map[string]*ebpf.Program {
	return bpfprog.Programs(&g.objs.netguardPrograms)
}
