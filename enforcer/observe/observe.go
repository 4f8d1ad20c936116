//go:build linux && (amd64 || arm64)

package observe

import (
	"golang.org/x/sys/unix"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/klocklabs/klock/enforcer/bpfprog"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/nshelper"
	"github.com/klocklabs/klock/internal/backlog"
	"github.com/klocklabs/klock/internal/bpfmap"
	"github.com/klocklabs/klock/internal/kbtf"
	"github.com/klocklabs/klock/internal/ringsync"
)

// Kind says what a Record carries.
type Kind uint8

const (
	// KindEvent: an operation mapped to a triple (Record.Event).
	KindEvent Kind = iota + 1
	// KindLost: Record.Lost.Count records of this cgroup were not
	// delivered (the kernel ring buffer was full, or the Watch channel was).
	KindLost
	// KindFork: a new process (Event.PID) of the watched cgroup, child of
	// Record.PPID.
	KindFork
	// KindExit: a whole process (Event.PID) ended; Record.ExitStatus.
	KindExit
	// KindUnobserved: the process did something this backend cannot see
	// through: io_uring_setup/enter/register (io_uring operations do not
	// pass the syscall tracepoints) or an ia32 (32-bit) syscall, which is
	// not decoded. Event has the pid, comm, Syscall and Errno; no triple.
	KindUnobserved
)

func (k Kind) String() string {
	return [...]string{"?", "event", "lost", "fork", "exit", "unobserved"}[k]
}

// Record is one thing the observer reports for a watched cgroup.
type Record struct {
	Kind     Kind
	CgroupID uint64
	// Event: KindEvent (Triple set), and the who/when of the other kinds.
	Event event.Event
	// Lost: KindLost.
	Lost event.Lost
	// Arg is the path string the process passed (for the log), when any.
	Arg string
	// Path and ExtraPath say how Event.Triple.Path and Event.Extra.Path
	// were obtained.
	Path, ExtraPath PathSource
	// ReplaceUnknown: a rename without RENAME_NOREPLACE/EXCHANGE; whether
	// it replaced an existing destination cannot be known after the fact,
	// so Extra is MUTATES dst (fail closed). A caller that knows the
	// destination did not exist before (e.g. from the pre-flight snapshot)
	// may read it as PROVIDES.
	ReplaceUnknown bool
	// MetadataUnverified: a chmod/chown/utimes/xattr change that took
	// effect on a relative name whose base directory could not be verified
	// against the one the kernel used, or on an absolute name that led
	// through a symlink (Path is PathBestEffort: the kernel did not name
	// the inode, no ctime tracepoints before 6.13). Metadata
	// has no kernel wall, so the reported path may be one the agent chose
	// after the fact (chdir out, chmod, chdir back): strict mode must not
	// trust it.
	MetadataUnverified bool
	// NameReread: the kernel read the call's path, but the BPF program's
	// read of it faulted (its page was out of the page tables by the
	// syscall's exit: reclaim, compaction, or the process's own madvise),
	// so the path was read again from the process's memory afterwards.
	// The process could have changed it in between: only a kernel file
	// wall, which judged the kernel's own copy, backs it. Set only for
	// operations such a wall mediates (creating, removing, linking and
	// renaming names).
	NameReread bool
	// Ino and Dev identify the object the kernel acted on, when the BPF
	// program could name it (opens, exec, f* calls, and path-based
	// metadata calls where the ctime hooks attached); Dev uses stat's
	// encoding. Zero otherwise. Lets a caller spot hard-link aliases.
	Ino, Dev uint64
	// PPID: KindFork.
	PPID uint32
	// seen is the key the kernel counts this open's repeats under, when
	// counted (Watch.Forget).
	seen    seenKey
	counted bool
	// scope says where the file of a read-only open is (its mount and
	// the task's root), for CountBelow, when the open is such a read.
	scope    scopeKey
	scopable bool
	// ExitStatus: KindExit, the kernel's exit_code (wait status).
	ExitStatus uint32
}

// Options tunes Load. The zero value is the default.
type Options struct {
	// RingBytes is the kernel ring buffer size (a power of two, at least a
	// page). Default 16 MiB.
	RingBytes uint32
	// Buffer is how many records a Watch holds for its reader at most.
	// Default 16384: the slack between the ring's reader and a session
	// that stalls (80 ms of the fastest agent measured here,
	// BenchmarkObserveEventsPerSecond); past it a record is counted lost.
	// The first chanSlots are the Watch's channel; the rest is a backlog
	// that exists only while the session lags (internal/backlog).
	Buffer int
	// WakeupBytes: the kernel wakes the reader only once this many bytes
	// are pending (far fewer wakeups under load: about twice the
	// throughput here); the reader also polls every PollInterval, so a
	// record waits at most that long. Default 256 KiB.
	WakeupBytes uint64
	// WakeEveryRecord wakes the reader for every record instead (lowest
	// latency, lower throughput); WakeupBytes is then ignored.
	WakeEveryRecord bool
	// BatchUrgent makes the records that otherwise wake the reader at once
	// wait for the batch too: a chmod, chown or xattr change (no wall
	// blocks them) and an operation a wall refused, which is how a
	// violation usually shows; read at once, a strict session is killed
	// within a millisecond instead of the next poll (BenchmarkDetectToKill
	// in test/perf). For tests that need the reader to look late.
	BatchUrgent bool
	// MetadataByFentry names path-based metadata calls' inodes with the
	// fentry programs even where the ctime tracepoints exist: a test of
	// the fallback kernels before 6.13 use, on any kernel.
	MetadataByFentry bool
	// PollInterval bounds how long a record can wait unread, and how often
	// per-session loss counters are read. Default 10ms.
	PollInterval time.Duration
	// Logger receives decoding problems. Default slog.Default().
	Logger *slog.Logger
	// SyscallLinger keeps the syscall programs attached this long after
	// the last Watch that needs them ends (0: detached at once). Attaching
	// costs a session 1-15 ms here (the kernel patches the tracepoint's
	// static key on every CPU); a daemon serving sessions one after
	// another sets it so that only the first of a burst pays, at the price
	// of every syscall on the machine taking the tracepoint path for that
	// long after the last.
	SyscallLinger time.Duration
}

// ErrClosed is returned by calls on a closed Observer or Watch.
var ErrClosed = errors.New("observe: closed")

// ErrLoad wraps a failure to load the observation programs (the
// verifier's log included when it refused one).
var ErrLoad = errors.New("observe: load BPF programs")

// ErrWatched is returned by Watch for a cgroup that is already watched.
var ErrWatched = errors.New("observe: cgroup already watched")

// Observer holds the loaded programs and the reader goroutine; one serves
// any number of sessions.
type Observer struct {
	opts  Options
	objs  observeObjects
	links []link.Link // process events: attached while loaded
	// The syscall programs (sys_exit, ctime) are attached only while a
	// Watch needs them (a full one, see fullWatch): a syscall tracepoint sends every
	// syscall of every process on the machine through the slow path, which
	// a bpf-lsm session, deciding in its hooks, does not need. Under o.mu.
	sysProgs []*ebpf.Program
	// metaFentry: the fentry programs that name a metadata change's
	// inode where the ctime tracepoints are missing (before 6.13).
	metaFentry []*ebpf.Program
	sysLinks   []link.Link
	linger     *time.Timer // pending detach (SyscallLinger), under o.mu
	rd         *ringbuf.Reader
	loop       *ringsync.Loop
	res        *resolver
	clk        bootClock
	log        *slog.Logger

	mu      sync.Mutex
	watches map[uint64]*Watch
	closed  bool

	wg sync.WaitGroup

	decodeErrs uint64
	// reread counts paths read again from a process after the BPF read
	// of them faulted (rereadFaulted).
	reread     atomic.Uint64
	ctimeHooks int
	// metaHooksErr: why no program names a path-based metadata call's
	// inode on this kernel (the fentry fallback's load or attach error),
	// so the log can say what is missing rather than guess.
	metaHooksErr error

	// forget is set by Unwatch: the reader then drops the resolver's
	// inode-keyed caches before its next record. An ended session's
	// directories get deleted and their inode numbers reused; a cached
	// name must never answer for another session's object.
	forget atomic.Bool
}

// Watch is one watched cgroup's subscription.
type Watch struct {
	o       *Observer
	id      uint64
	q       *backlog.Queue[Record] // the session's records (backlog.go)
	closed  bool
	full    bool            // records syscalls (not ProcessEvents only)
	root    *ownRoot        // InOwnRoot or InRoot; nil: the observer's root
	retired []*ownRoot      // roots InRoot replaced, closed by Unwatch
	helper  func() *os.File // Helper: opens a root's view
	losses  bpfprog.Losses  // under o.mu
	// seeds are KnownDirs by inode; seeded is the resolver generation they
	// were last put in (the reader re-seeds after a forget).
	seeds  map[ident]string
	seeded uint64
	// counted: the record reported for each open whose repeats the kernel
	// counts (Repeats turns the counts into records). Reader goroutine
	// only, under o.mu.
	counted map[seenKey]Record
	// below: the directory below which the kernel counts reads
	// (CountBelow), and the read that started it. Under o.mu.
	below *belowEntry
	// held: each thread's interrupted call, until its next record
	// (interrupted.go). The reader goroutine's alone; sending a held
	// call takes o.mu.
	held map[uint32]*heldCall
}

// Load loads and attaches the observation programs with default options.
func Load() (*Observer, error) { return LoadOptions(Options{}) }

// LoadOptions loads and attaches the observation programs. Nothing is
// observed until Watch adds a cgroup.
func LoadOptions(opts Options) (*Observer, error) {
	if opts.RingBytes == 0 {
		opts.RingBytes = 16 << 20
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 16384
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 10 * time.Millisecond
	}
	if opts.WakeupBytes == 0 {
		opts.WakeupBytes = 256 << 10
	}
	if opts.WakeEveryRecord {
		opts.WakeupBytes = 0
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := bpfprog.Memlock(ErrLoad); err != nil {
		return nil, err
	}
	// The kernel's BTF (the programs' attach targets, kfuncs and CO-RE
	// relocations need it) decodes while the object is parsed and the maps
	// are created, which need none of it.
	btfCache := kbtf.Warm()
	spec, err := loadObserve()
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	spec.Maps[observeMapEvents].MaxEntries = opts.RingBytes
	if err := spec.Variables[observeVarWakeupBytes].Set(opts.WakeupBytes); err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	if opts.BatchUrgent {
		if err := spec.Variables[observeVarWakeUrgent].Set(uint8(0)); err != nil {
			return nil, fmt.Errorf("observe: %w", err)
		}
	}
	o := &Observer{opts: opts, res: newResolver(), clk: newBootClock(), log: opts.Logger,
		watches: make(map[uint64]*Watch)}
	if err := o.load(spec, btfCache); err != nil {
		return nil, err
	}
	o.sysProgs = append(o.sysProgs, o.objs.ObsSysExit)
	for _, p := range []*ebpf.Program{o.objs.ObsCtimeTs, o.objs.ObsCtimeXchg, o.objs.ObsCtimeSkip} {
		if p != nil {
			o.sysProgs = append(o.sysProgs, p)
		}
	}
	for _, p := range []*ebpf.Program{o.objs.ObsNotifyChange, o.objs.ObsSetxattr, o.objs.ObsRemovexattr} {
		if p != nil {
			o.metaFentry = append(o.metaFentry, p)
		}
	}
	for _, p := range []*ebpf.Program{o.objs.ObsExec, o.objs.ObsFork, o.objs.ObsExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			o.closeKernel()
			return nil, fmt.Errorf("observe: attach %s: %w", p, err)
		}
		o.links = append(o.links, l)
	}
	o.rd, err = ringbuf.NewReader(o.objs.Events)
	if err != nil {
		o.closeKernel()
		return nil, fmt.Errorf("observe: ring buffer: %w", err)
	}
	// Records below wakeup_bytes wake nobody: the loop polls, and reads
	// the loss counters there.
	o.loop = ringsync.New(o.rd, ringsync.WithPoll(o.opts.PollInterval, o.pollLost), ringsync.OnFlush(o.flushed))
	o.wg.Add(1)
	go o.read()
	return o, nil
}

// load creates the maps, then loads the programs against them: sys_exit
// (the one long verification) on its own goroutine, the process-event
// programs and the optional ctime programs (kernel 6.13+:
// inode_set_ctime_to_ts, ctime_ns_xchg, ctime_xchg_skip, which catch the
// inode a path-based metadata call such as chmod, chown, utimes, truncate
// or an xattr call by path changed) beside it. Each program is loaded on
// its own against the same maps, so the verifier runs on both CPUs and a
// ctime program this kernel lacks is only left out (CtimeHooks says how
// many are attached). On error nothing stays loaded.
func (o *Observer) load(spec *ebpf.CollectionSpec, btfCache *btf.Cache) error {
	var maps struct {
		observeMaps
		Rodata *ebpf.Map `ebpf:".rodata"`
		Bss    *ebpf.Map `ebpf:".bss"`
	}
	if err := spec.LoadAndAssign(&maps, &ebpf.CollectionOptions{Cache: btfCache}); err != nil {
		return bpfprog.LoadError(ErrLoad, fmt.Errorf("the maps: %w", err))
	}
	// The programs hold the data sections once loaded.
	defer maps.Rodata.Close()
	defer maps.Bss.Close()
	o.objs.observeMaps = maps.observeMaps
	repl := map[string]*ebpf.Map{
		observeMapEvents: maps.Events, observeMapKpbuf: maps.Kpbuf, observeMapLost: maps.Lost,
		observeMapPending: maps.Pending, observeMapScratch: maps.Scratch, observeMapSeen: maps.Seen, observeMapSubtree: maps.Subtree,
		observeMapWatched: maps.Watched, ".rodata": maps.Rodata, ".bss": maps.Bss,
	}
	load := func(name string) (*ebpf.Program, error) {
		one := &ebpf.CollectionSpec{Maps: spec.Maps, Programs: map[string]*ebpf.ProgramSpec{name: spec.Programs[name]},
			Types: spec.Types, ByteOrder: spec.ByteOrder}
		coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{Cache: btfCache, MapReplacements: repl})
		if err != nil {
			return nil, bpfprog.LoadError(ErrLoad, err)
		}
		p := coll.DetachProgram(name)
		coll.Close()
		return p, nil
	}
	var sysErr error
	sysDone := make(chan struct{})
	go func() {
		defer close(sysDone)
		o.objs.ObsSysExit, sysErr = load("obs_sys_exit")
	}()
	var err error
	for _, p := range []struct {
		name string
		dst  **ebpf.Program
	}{{"obs_exec", &o.objs.ObsExec}, {"obs_fork", &o.objs.ObsFork}, {"obs_exit", &o.objs.ObsExit}} {
		if *p.dst, err = load(p.name); err != nil {
			break
		}
	}
	if err == nil && o.opts.MetadataByFentry {
		o.loadMetaFentry(load)
	} else if err == nil {
		for _, p := range []struct {
			name string
			dst  **ebpf.Program
		}{{"obs_ctime_ts", &o.objs.ObsCtimeTs}, {"obs_ctime_xchg", &o.objs.ObsCtimeXchg}, {"obs_ctime_skip", &o.objs.ObsCtimeSkip}} {
			var cerr error
			if *p.dst, cerr = load(p.name); cerr != nil {
				o.log.Debug("observe: optional ctime hook unavailable", "prog", p.name, "err", cerr)
				*p.dst = nil
			}
		}
		if o.objs.ObsCtimeTs == nil && o.objs.ObsCtimeXchg == nil && o.objs.ObsCtimeSkip == nil {
			o.loadMetaFentry(load)
		}
	}
	<-sysDone
	if err == nil {
		err = sysErr
	}
	if err != nil {
		_ = o.objs.Close()
		return err
	}
	return nil
}

// CtimeHooks is the number of programs attached, while a Watch needs the
// syscall programs, that name a path-based metadata call's inode: the
// ctime tracepoints (6.13+), else the fentry programs on notify_change
// and the xattr setters. 0: such calls carry no inode (no tracepoints,
// and no BPF trampolines for the fentry programs).
func (o *Observer) CtimeHooks() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ctimeHooks
}

// MetadataHooksErr says why no program names a path-based metadata call's
// inode (CtimeHooks is 0): the fentry fallback's load or attach error, nil
// when the hooks are attached or were never tried.
func (o *Observer) MetadataHooksErr() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ctimeHooks > 0 {
		return nil
	}
	return o.metaHooksErr
}

// NamesMetadataInodes reports whether this kernel loaded programs that
// name a path-based metadata call's inode (the ctime tracepoints, or all
// of the fentry fallback): what CtimeHooks counts once attached.
func (o *Observer) NamesMetadataInodes() bool {
	return o.objs.ObsCtimeTs != nil || o.objs.ObsCtimeXchg != nil || o.objs.ObsCtimeSkip != nil || len(o.metaFentry) == 3
}

// SyscallsAttached reports whether the syscall programs are attached (some
// Watch records file and network syscalls).
func (o *Observer) SyscallsAttached() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.sysLinks) > 0
}

// SetSyscallLinger changes Options.SyscallLinger for the running observer
// (klockd's reload): it applies from the next time the last full watch
// goes; a linger already running ends when it was set to.
func (o *Observer) SetSyscallLinger(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.opts.SyscallLinger = d
}

// attachSyscalls attaches sys_exit (required) and the ctime programs
// (optional: one that does not attach is left out). Called with o.mu held.
func (o *Observer) attachSyscalls() error {
	o.ctimeHooks = 0
	for i, p := range o.sysProgs {
		l, err := attachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			if i == 0 {
				o.detachSyscalls()
				return fmt.Errorf("observe: attach %s: %w", p, err)
			}
			o.log.Debug("observe: optional ctime hook not attached", "prog", p, "err", err)
			continue
		}
		o.sysLinks = append(o.sysLinks, l)
		if i > 0 {
			o.ctimeHooks++
		}
	}
	o.attachMetaFentry()
	return nil
}

// reattachWait bounds how long attachTracing waits for the kernel to let
// go of a program's previous link.
const reattachWait = 2 * time.Second

// attachTracing attaches a program that may have been attached before
// (the syscall programs come and go with the sessions that need them),
// waiting out its previous link while the kernel still holds it. On
// kernels whose raw tracepoints key a probe by its program (6.1: the
// link is not the probe's data), attaching it again answers EEXIST until
// the old link is released, and a link closed a moment ago is released
// only when the last copy of its descriptor goes: a child forked before
// the close keeps one until its exec closes it, after its parent has
// resumed. Any other error, or one that outlasts reattachWait, is
// returned.
func attachTracing(opts link.TracingOptions) (link.Link, error) {
	deadline := time.Now().Add(reattachWait)
	for {
		l, err := link.AttachTracing(opts)
		if err == nil || !(errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EBUSY)) || time.Now().After(deadline) {
			return l, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// loadMetaFentry loads the fentry programs for a kernel without the ctime
// tracepoints (optional, like them: a kernel without BPF trampolines or
// without one of the functions leaves it out).
func (o *Observer) loadMetaFentry(load func(string) (*ebpf.Program, error)) {
	for _, p := range []struct {
		name string
		dst  **ebpf.Program
	}{{"obs_notify_change", &o.objs.ObsNotifyChange}, {"obs_setxattr", &o.objs.ObsSetxattr}, {"obs_removexattr", &o.objs.ObsRemovexattr}} {
		var err error
		if *p.dst, err = load(p.name); err != nil {
			o.log.Debug("observe: optional metadata fentry unavailable", "prog", p.name, "err", err)
			o.metaHooksErr = fmt.Errorf("load %s: %w", p.name, err)
			*p.dst = nil
		}
	}
}

// attachMetaFentry attaches the fentry programs, counted as ctime hooks
// when all three attach (metadata calls by name then carry their inode);
// none stays attached otherwise. Called with o.mu held.
func (o *Observer) attachMetaFentry() {
	if len(o.metaFentry) != 3 {
		return
	}
	var links []link.Link
	for _, p := range o.metaFentry {
		l, err := attachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceFEntry})
		if err != nil {
			o.log.Debug("observe: optional metadata fentry not attached", "prog", p, "err", err)
			o.metaHooksErr = fmt.Errorf("attach %s: %w", p, err)
			for _, l := range links {
				l.Close()
			}
			return
		}
		links = append(links, l)
	}
	o.sysLinks = append(o.sysLinks, links...)
	o.ctimeHooks += len(links)
}

// fullWatch reports whether some Watch records syscalls. Called with o.mu
// held.
func (o *Observer) fullWatch() bool {
	for _, w := range o.watches {
		if w.full {
			return true
		}
	}
	return false
}

// releaseSyscalls detaches the syscall programs once no Watch needs them,
// at once or after SyscallLinger. Called with o.mu held.
func (o *Observer) releaseSyscalls() {
	if o.fullWatch() || len(o.sysLinks) == 0 {
		return
	}
	if o.opts.SyscallLinger <= 0 {
		o.detachSyscalls()
		return
	}
	if o.linger != nil {
		o.linger.Stop()
	}
	o.linger = time.AfterFunc(o.opts.SyscallLinger, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if !o.closed && !o.fullWatch() {
			o.detachSyscalls()
		}
	})
}

// detachSyscalls detaches the syscall programs. Called with o.mu held.
func (o *Observer) detachSyscalls() {
	if o.linger != nil {
		o.linger.Stop()
		o.linger = nil
	}
	for _, l := range o.sysLinks {
		_ = l.Close()
	}
	o.sysLinks = nil
}

func (o *Observer) closeKernel() {
	for _, l := range o.links {
		_ = l.Close()
	}
	o.links = nil
	o.detachSyscalls()
	_ = o.objs.Close()
}

// Close detaches the programs, stops the reader and closes every Watch's
// channel. Records still in the ring buffer are discarded.
func (o *Observer) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	o.mu.Unlock()
	for _, l := range o.links {
		_ = l.Close()
	}
	o.mu.Lock()
	o.detachSyscalls()
	o.mu.Unlock()
	err := o.rd.Close()
	o.wg.Wait()
	o.mu.Lock()
	for id, w := range o.watches {
		w.closed = true
		delete(o.watches, id)
		w.end()
	}
	o.mu.Unlock()
	o.links = nil
	return errors.Join(err, o.objs.Close())
}

// Watch starts observing the cgroup with this id (cgroup.Group.ID). Its
// records arrive on the returned Watch's channel. Processes already in the
// cgroup are observed from now on; put the agent there before it starts
// (SysProcAttr.UseCgroupFD) and call Watch before that.
func (o *Observer) Watch(cgroupID uint64, opts ...WatchOption) (*Watch, error) {
	var wo watchOpts
	for _, f := range opts {
		f(&wo)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, ErrClosed
	}
	if _, ok := o.watches[cgroupID]; ok {
		return nil, fmt.Errorf("%w: %d", ErrWatched, cgroupID)
	}
	full := wo.ops == 0
	if full && len(o.sysLinks) == 0 {
		if err := o.attachSyscalls(); err != nil {
			return nil, err
		}
	}
	if full && o.linger != nil { // lingering: this Watch keeps them
		o.linger.Stop()
		o.linger = nil
	}
	s := observeObsSession{Ops: wo.ops}
	if err := o.objs.Watched.Update(cgroupID, &s, ebpf.UpdateNoExist); err != nil {
		o.releaseSyscalls()
		return nil, fmt.Errorf("observe: watch cgroup %d: %w", cgroupID, err)
	}
	if wo.inRoot != nil {
		wo.inRoot.helper = wo.helper
	}
	w := &Watch{o: o, id: cgroupID, full: full, root: wo.inRoot, helper: wo.helper, q: backlog.New[Record](chanSlots, o.opts.Buffer), seeds: map[ident]string{}, counted: map[seenKey]Record{}}
	for _, d := range wo.dirs {
		var st unix.Stat_t
		if unix.Stat(d.at, &st) == nil {
			w.seeds[statIdent(&st)] = d.name
		}
	}
	o.watches[cgroupID] = w
	return w, nil
}

// Unwatch stops observing the cgroup and closes its Watch's channel after
// delivering any pending loss report it can. Records of that cgroup still
// in flight are discarded.
func (o *Observer) Unwatch(cgroupID uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.watches[cgroupID]
	if !ok {
		return fmt.Errorf("observe: cgroup %d is not watched", cgroupID)
	}
	o.pollLostLocked(w)
	o.forget.Store(true)
	err := o.objs.Watched.Delete(cgroupID)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		err = fmt.Errorf("observe: unwatch cgroup %d: %w", cgroupID, err)
	} else {
		err = nil
	}
	if cerr := bpfmap.DeleteOwned[seenKey, uint64](o.objs.Seen, cgroupID, func(k *seenKey) uint64 { return k.Cgid }); cerr != nil {
		err = errors.Join(err, fmt.Errorf("observe: forget counted opens of cgroup %d: %w", cgroupID, cerr))
	}
	if cerr := o.objs.Subtree.Delete(cgroupID); cerr != nil && !errors.Is(cerr, ebpf.ErrKeyNotExist) {
		err = errors.Join(err, fmt.Errorf("observe: forget the counted reads of cgroup %d: %w", cgroupID, cerr))
	}
	w.losses.Deliver(w.lostRecord)
	w.closed = true
	delete(o.watches, cgroupID)
	w.end()
	for _, r := range append(w.retired, w.root) {
		if r != nil {
			r.close()
		}
	}
	o.releaseSyscalls()
	return err
}

// InRoot gives the Watch the root of its processes from now on, as
// InOwnRoot does at Watch time, for a session whose mount namespace exists
// only after the Watch must be in place (klock run's stage 2 makes it, and
// the Watch counts stage 2's execs from the first): its private /tmp and
// the paths it hides are another file than the observer's at the same
// name. A later call (stage 2 started over) replaces the root; the caller
// keeps mntns open until Unwatch or the next InRoot.
func (w *Watch) InRoot(mntns *os.File, init int) {
	o := w.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if w.root != nil {
		// The reader may be translating a record through it: it is
		// closed with the Watch.
		w.retired = append(w.retired, w.root)
	}
	w.root = &ownRoot{ns: mntns, init: uint32(init), helper: w.helper}
}

// InLiveRoot is InRoot for a namespace whose first process, init, is a
// child of this process not yet reaped that keeps the namespace's root as
// its own (klock run's stage 2): the root and the mount table are opened
// now, through /proc, rather than by a helper process when first needed.
// When they cannot be, it is InRoot.
func (w *Watch) InLiveRoot(mntns *os.File, init int) {
	v, err := nshelper.OpenLiveView(init)
	w.InRoot(mntns, init)
	if err != nil {
		return
	}
	o := w.o
	o.mu.Lock()
	defer o.mu.Unlock()
	r := w.root
	r.once.Do(func() { r.view = v })
}

// Records is the channel of this cgroup's records. Unwatch and
// Observer.Close close it behind the records delivered before them
// (Pending says whether any wait).
func (w *Watch) Records() <-chan Record { return w.q.C() }

// Repeats returns, for every open the kernel counted instead of reporting
// again, the record it reported first standing for the unreported
// repeats (itself and Event.Repeat more). Call it after the agent has exited and Sync has
// returned, before Unwatch.
func (w *Watch) Repeats() ([]Record, error) {
	keys, counts, err := bpfmap.Owned[seenKey, uint64](w.o.objs.Seen, w.id, func(k *seenKey) uint64 { return k.Cgid })
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	var out []Record
	for i, k := range keys {
		n := counts[i]
		if n < 2 {
			continue
		}
		rec, ok := w.counted[k]
		if !ok {
			continue // its first record was lost, and counted as lost
		}
		rec.Event.Repeat = n - 2 // the record itself is one of the n-1 repeats
		out = append(out, rec)
	}
	if err != nil {
		return out, fmt.Errorf("observe: read counted opens: %w", err)
	}
	return out, nil
}

// Forget stops counting repeats under rec, an open the caller did not
// take as the agent's (the runtime's or stage 2's, before the agent's
// history starts): the next open of the same object is reported again
// instead of counted as a repeat of rec, which Repeats would hand over
// as the agent's at the end. It returns how many repeats the kernel had
// counted since rec (taken away atomically with the key): a caller that
// cannot tell whose they were judges rec for them. A record not counted
// returns 0.
func (w *Watch) Forget(rec Record) (uint64, error) {
	if !rec.counted {
		return 0, nil
	}
	w.o.mu.Lock()
	delete(w.counted, rec.seen)
	w.o.mu.Unlock()
	var n uint64
	k := rec.seen
	if err := w.o.objs.Seen.LookupAndDelete(&k, &n); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("observe: forget a counted open: %w", err)
	}
	return n - 1, nil // the count includes rec itself
}

// CgroupID is the watched cgroup.
func (w *Watch) CgroupID() uint64 { return w.id }

// Close is Unwatch.
func (w *Watch) Close() error { return w.o.Unwatch(w.id) }

// LostTotal is the number of records the kernel could not put in the ring
// buffer since Load, over all cgroups (the per-CPU `lost` counters).
func (o *Observer) LostTotal() (uint64, error) {
	var per []uint64
	if err := o.objs.Lost.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("observe: read lost counters: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// Sync returns once every record the kernel produced before the call has
// been delivered (or counted lost), loss counters included. A syscall's
// record is produced before the syscall returns, so after a process has
// exited, Sync then Unwatch loses none of its records.
func (o *Observer) Sync(ctx context.Context) error {
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if closed {
		return ErrClosed
	}
	err := o.loop.Sync(ctx)
	if errors.Is(err, ringsync.ErrClosed) {
		return ErrClosed
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("observe: %w", err)
	}
	return err
}

// flushed runs in the reader when a Sync's flush has been read through:
// the loss counters, and the interrupted calls held back, are delivered.
func (o *Observer) flushed() {
	o.pollLost()
	o.mu.Lock()
	for _, w := range o.watches {
		w.flushHeld(time.Time{})
	}
	o.mu.Unlock()
}

func (o *Observer) clock(ns uint64) time.Time { return o.clk.at(ns) }

// read is the reader goroutine.
func (o *Observer) read() {
	defer o.wg.Done()
	var r raw
	o.loop.Run(func(rec *ringbuf.Record) {
		if err := decode(rec.RawSample, &r); err != nil {
			o.decodeErrs++
			o.log.Warn("observe: bad record", "err", err, "len", len(rec.RawSample))
			return
		}
		o.dispatch(&r)
	}, func(err error) { o.log.Warn("observe: ring buffer read", "err", err) })
}

func (o *Observer) dispatch(r *raw) {
	o.mu.Lock()
	w := o.watches[r.cgid]
	var root *ownRoot
	if w != nil {
		root = w.root
	}
	o.mu.Unlock()
	if w == nil {
		return // unwatched since
	}
	if o.forget.Swap(false) {
		o.res.forget()
	}
	if w.seeded != o.res.gen+1 {
		for id, p := range w.seeds {
			o.res.remember(id, p)
		}
		w.seeded = o.res.gen + 1
	}
	if len(w.held) > 0 {
		o.mu.Lock()
		w.settleHeld(r)
		o.mu.Unlock()
	}
	// An interrupted call's records wait for its thread's next record
	// (interrupted.go).
	var held []Record
	stop := interrupted(r.ret)
	o.translate(r, root, func(rec Record) {
		if stop {
			held = append(held, rec)
			return
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if w.closed {
			return
		}
		if r.kflags&fCounted != 0 {
			rec.seen, rec.counted = r.seen, true
			w.counted[r.seen] = rec
		}
		if r.scope.Cgid != 0 {
			rec.scope, rec.scopable = r.scope, true
		}
		w.send(rec)
	})
	if len(held) > 0 {
		o.mu.Lock()
		if !w.closed {
			w.hold(r, held, time.Now())
		}
		o.mu.Unlock()
	}
}

// pollLost reads the loss counters, and sends the interrupted calls held
// longer than heldMax.
func (o *Observer) pollLost() {
	o.mu.Lock()
	defer o.mu.Unlock()
	cutoff := time.Now().Add(-heldMax)
	for _, w := range o.watches {
		o.pollLostLocked(w)
		w.losses.Deliver(w.lostRecord)
		w.flushHeld(cutoff)
	}
}

// pollLostLocked adds the kernel's per-session loss since the last look.
func (o *Observer) pollLostLocked(w *Watch) {
	var s observeObsSession
	if err := o.objs.Watched.Lookup(w.id, &s); err != nil {
		return
	}
	w.losses.Kernel(s.Lost)
}

// Programs are the observer's loaded programs by name, for their
// run-time statistics (klockd --metrics-bpf-stats).
func (o *Observer) Programs() map[string]*ebpf.Program {
	return bpfprog.Programs(&o.objs.observePrograms)
}
