//go:build linux

package lsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/klocklabs/klock/enforcer/bpfprog"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/internal/bpfmap"
	"github.com/klocklabs/klock/internal/ringsync"
	"github.com/klocklabs/klock/policy"
)

// Sentinel errors.
var (
	ErrLoad        = errors.New("lsm: load BPF-LSM programs")
	ErrUnsupported = errors.New("lsm: the ruleset cannot be enforced by bpf-lsm")
	ErrAttach      = errors.New("lsm: attach session")
	ErrClosed      = errors.New("lsm: closed")
)

// EventBuffer is how many events a session's channel holds before the
// reader blocks (the ring buffer then absorbs the rest).
const EventBuffer = 4096

// LSM is the loaded, attached backend, shared by sessions.
type LSM struct {
	objs  lsmObjects
	links []link.Link
	rd    *ringbuf.Reader
	loop  *ringsync.Loop
	wg    sync.WaitGroup
	log   *slog.Logger

	mu       sync.Mutex
	sessions map[uint64]*Session
	nextSess uint32
	closed   bool
}

// Load loads the programs and attaches them to their LSM hooks.
func Load() (*LSM, error) {
	if err := bpfprog.Memlock(ErrLoad); err != nil {
		return nil, err
	}
	l := &LSM{sessions: map[uint64]*Session{}, log: slog.Default().With("backend", "bpf-lsm")}
	spec, err := loadLsm()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLoad, err)
	}
	if err := setDentryArgs(spec); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLoad, err)
	}
	if err := spec.Variables["wakeup_bytes"].Set(uint64(wakeupBytes)); err != nil {
		return nil, fmt.Errorf("%w: set wakeup_bytes: %w", ErrLoad, err)
	}
	if err := bpfprog.Load(ErrLoad, func(opts *ebpf.CollectionOptions) error { return spec.LoadAndAssign(&l.objs, opts) }); err != nil {
		return nil, err
	}
	if err := l.attach(); err != nil {
		l.objs.Close()
		return nil, err
	}
	var rd *ringbuf.Reader
	rd, err = ringbuf.NewReader(l.objs.LsmEvents)
	if err != nil {
		l.closeLinks()
		l.objs.Close()
		return nil, fmt.Errorf("%w: ring buffer reader: %w", ErrLoad, err)
	}
	l.rd = rd
	// Allowed decisions wake the reader only past wakeupBytes: it polls.
	l.loop = ringsync.New(rd, ringsync.WithPoll(pollInterval, nil))
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.loop.Run(func(rec *ringbuf.Record) { l.deliver(rec.RawSample) },
			func(err error) { l.log.Error("read events", "error", err) })
	}()
	return l, nil
}

// attach attaches every program to its hook; on failure none stays.
func (l *LSM) attach() error {
	p := &l.objs.lsmPrograms
	for _, prog := range []*ebpf.Program{p.KlockFileOpen, p.KlockBprmCheck, p.KlockPathMknod, p.KlockPathMkdir,
		p.KlockPathSymlink, p.KlockPathUnlink, p.KlockPathRmdir, p.KlockPathTruncate, p.KlockPathChmod,
		p.KlockPathChown, p.KlockPathLink, p.KlockPathRename, p.KlockSocketConnect,
		p.KlockInodeSetattr, p.KlockInodeSetxattr, p.KlockInodeRemovexattr, p.KlockUnixStreamConnect, p.KlockUnixMaySend,
		p.KlockSocketCreate, p.KlockFileIoctl, p.KlockMmapFile, p.KlockFileMprotect} {
		lk, err := link.AttachLSM(link.LSMOptions{Program: prog})
		if err != nil {
			l.closeLinks()
			return fmt.Errorf("%w: attach %s: %w", ErrLoad, prog, err)
		}
		l.links = append(l.links, lk)
	}
	return nil
}

func (l *LSM) closeLinks() {
	for _, lk := range l.links {
		lk.Close()
	}
	l.links = nil
}

// Close detaches everything. Sessions still attached are closed first.
func (l *LSM) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	var open []*Session
	for _, s := range l.sessions {
		open = append(open, s)
	}
	l.mu.Unlock()
	var errs []error
	for _, s := range open {
		errs = append(errs, s.Close())
	}
	l.closeLinks()
	errs = append(errs, l.rd.Close())
	l.wg.Wait()
	errs = append(errs, l.objs.Close())
	return errors.Join(errs...)
}

// Session is one cgroup's rules and events.
type Session struct {
	l       *LSM
	cgid    uint64
	sess    uint32
	entries []entry
	events  chan event.Event
	lost    chan event.Lost

	once     sync.Once
	closeErr error
	lostSeen uint64
	mu       sync.Mutex // guards sess/entries on Update, and counted
	// counted: the reported first of each open whose repeats the kernel
	// counts (Repeats turns the counts into events).
	counted map[seenKey]event.Event
}

// Repeats returns, for every open the kernel counted instead of
// reporting again, its first event standing for the unreported repeats
// (itself and Repeat more: Repeat is their number minus one). Call it once the agent has exited and Idle is true.
func (s *Session) Repeats() ([]event.Event, error) {
	// On a read error the events read so far are returned with it: the
	// log then understates the repeats, never invents any.
	keys, counts, err := bpfmap.Owned[lsmKlsmSeenKey, uint64](s.l.objs.LsmSeen, s.cgid, func(k *lsmKlsmSeenKey) uint64 { return k.Cgid })
	var out []event.Event
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		n := counts[i]
		if n < 2 {
			continue
		}
		ev, ok := s.counted[seenKey{dent: k.Dent, mnt: k.Mnt, ino: k.Ino, gen: k.Gen, sess: k.Sess, rgen: k.Rgen, op: k.Op, need: k.Need}]
		if !ok {
			continue // its first record was lost, and counted as lost
		}
		ev.Repeat = n - 2 // the event itself is one of the n-1 repeats
		out = append(out, ev)
	}
	if err != nil {
		return out, fmt.Errorf("lsm: read counted opens: %w", err)
	}
	return out, nil
}

// AttachOption tunes Attach.
type AttachOption func(*attachOpts)

type attachOpts struct{ armAtFirstExec bool }

// ArmAtFirstExec arms the session at the first exec in its cgroup instead
// of the second: no klock stage 2 runs there first (a container adopted
// through OCI hooks alone, whose init execs the entrypoint itself).
func ArmAtFirstExec() AttachOption { return func(o *attachOpts) { o.armAtFirstExec = true } }

// Attach gives cgroup cgid the ruleset's rules. The session is armed at
// its first process's second exec (see the package documentation), or its
// first with ArmAtFirstExec.
func (l *LSM) Attach(cgid uint64, rs *policy.Ruleset, opts ...AttachOption) (*Session, error) {
	var ao attachOpts
	for _, o := range opts {
		o(&ao)
	}
	entries, err := compile(rs)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if _, dup := l.sessions[cgid]; dup {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: cgroup %d already has a session", ErrAttach, cgid)
	}
	l.nextSess++
	s := &Session{l: l, cgid: cgid, sess: l.nextSess, events: make(chan event.Event, EventBuffer), lost: make(chan event.Lost, 16),
		counted: map[seenKey]event.Event{}}
	l.sessions[cgid] = s
	l.mu.Unlock()
	if err := l.writeRules(s.sess, entries); err != nil {
		s.Close()
		return nil, err
	}
	s.entries = entries
	val := lsmKlsmSession{Sess: s.sess, Flags: sessionFlags(rs)}
	if ao.armAtFirstExec {
		val.Execs = 1 // the program skips the first exec while Execs < 1
	}
	if err := l.objs.LsmSessions.Update(cgid, val, ebpf.UpdateNoExist); err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: cgroup %d: %w", ErrAttach, cgid, err)
	}
	return s, nil
}

// sessionFlags: what the session's rules grant beyond paths.
func sessionFlags(rs *policy.Ruleset) uint32 {
	var f uint32
	if rs.Allows(policy.RawSocketTriple()).Allowed {
		f |= sessRaw
	}
	return f
}

func (l *LSM) writeRules(sess uint32, entries []entry) error {
	if err := (Rules{entries}).Write(l.objs.LsmRules, sess); err != nil {
		return fmt.Errorf("%w: %w", ErrAttach, err)
	}
	return nil
}

func (l *LSM) deleteRules(sess uint32, entries []entry) error {
	return Rules{entries}.Delete(l.objs.LsmRules, sess)
}

// Update replaces the session's rules (permissive mode's amendments): the
// new rules are written under a new id and switched to in one map update.
func (s *Session) Update(rs *policy.Ruleset) error {
	entries, err := compile(rs)
	if err != nil {
		return err
	}
	l := s.l
	l.mu.Lock()
	l.nextSess++
	sess := l.nextSess
	l.mu.Unlock()
	if err := l.writeRules(sess, entries); err != nil {
		l.deleteRules(sess, entries)
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var val lsmKlsmSession
	if err := l.objs.LsmSessions.Lookup(s.cgid, &val); err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	old, oldEntries := val.Sess, s.entries
	val.Sess, val.Flags = sess, sessionFlags(rs)
	if err := l.objs.LsmSessions.Update(s.cgid, val, ebpf.UpdateExist); err != nil {
		l.deleteRules(sess, entries)
		return fmt.Errorf("%w: switch rules: %w", ErrAttach, err)
	}
	s.sess, s.entries = sess, entries
	return l.deleteRules(old, oldEntries)
}

// Events delivers the session's decisions.
func (s *Session) Events() <-chan event.Event { return s.events }

// Lost delivers counts of decisions the kernel could not report.
func (s *Session) Lost() <-chan event.Lost { return s.lost }

// Sync reports decisions not yet delivered as lost: it reads the session's
// kernel loss counter. Call it after the agent exited, before the end.
func (s *Session) Sync() {
	var val lsmKlsmSession
	if err := s.l.objs.LsmSessions.Lookup(s.cgid, &val); err != nil {
		return
	}
	if n := val.Lost - s.lostSeen; n > 0 {
		s.lostSeen = val.Lost
		s.lost <- event.Lost{Time: time.Now(), Count: n}
	}
}

// Close removes the session's rules and stops its events.
func (s *Session) Close() error {
	s.once.Do(func() {
		l := s.l
		var errs []error
		if err := l.objs.LsmSessions.Delete(s.cgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
		s.mu.Lock()
		errs = append(errs, l.deleteRules(s.sess, s.entries))
		s.mu.Unlock()
		errs = append(errs,
			bpfmap.DeleteOwned[lsmKlsmCreated, uint8](l.objs.LsmCreated, s.cgid, func(k *lsmKlsmCreated) uint64 { return k.Cgid }),
			bpfmap.DeleteOwned[lsmKlsmSeenKey, uint64](l.objs.LsmSeen, s.cgid, func(k *lsmKlsmSeenKey) uint64 { return k.Cgid }))
		l.mu.Lock()
		delete(l.sessions, s.cgid)
		l.mu.Unlock()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// Allowed decisions wake the reader once wakeupBytes are waiting; between
// wake-ups it polls every pollInterval, and Flush reads what waits.
const (
	wakeupBytes  = 64 << 10
	pollInterval = 5 * time.Millisecond
)

// Flush returns once every record the kernel produced before the call
// has been delivered to its session's channel (the ring is read up to
// where it was, records that woke nobody included), or ctx ends. A
// delivery waits for room in its session's channel, so the caller keeps
// reading its session's events meanwhile.
func (l *LSM) Flush(ctx context.Context) error {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return ErrClosed
	}
	err := l.loop.Sync(ctx)
	if errors.Is(err, ringsync.ErrClosed) {
		return ErrClosed
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("bpf-lsm: %w", err)
	}
	return err
}

// Flush is LSM.Flush for the session's backend.
func (s *Session) Flush(ctx context.Context) error { return s.l.Flush(ctx) }

// deliver decodes one record and hands it to its session (records of a
// cgroup with no session, torn down since, are dropped).
func (l *LSM) deliver(b []byte) {
	if len(b) < hdrSize {
		return
	}
	cgid := binary.LittleEndian.Uint64(b[8:])
	l.mu.Lock()
	s := l.sessions[cgid]
	l.mu.Unlock()
	if s == nil {
		return
	}
	ev, key, ok := decode(b)
	if !ok {
		s.lost <- event.Lost{Time: time.Now(), Count: 1}
		return
	}
	if key != nil {
		s.mu.Lock()
		s.counted[*key] = ev
		s.mu.Unlock()
	}
	s.events <- ev
}

// Hooks names the LSM hooks the backend's programs attach to (file_open,
// path_unlink, ...), read from the compiled object, so what measures or
// probes the hooks (the benchmarks' floor) cannot drift from what Load
// attaches.
func Hooks() ([]string, error) {
	spec, err := loadLsm()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLoad, err)
	}
	var hooks []string
	for _, p := range spec.Programs {
		if p.Type == ebpf.LSM {
			hooks = append(hooks, p.AttachTo)
		}
	}
	slices.Sort(hooks)
	return hooks, nil
}

// Programs are the loaded BPF LSM programs by name, for their run-time
// statistics (klockd --metrics-bpf-stats).
func (l *LSM) Programs() map[string]*ebpf.Program {
	return bpfprog.Programs(&l.objs.lsmPrograms)
}
