package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultHostDir is where the sessions of one host (embedded ones and
// klockd's) keep their leases. /run is a tmpfs: the leases do not outlive
// the boot, as no session does.
const DefaultHostDir = "/run/klock/leases"

// ErrClosed: the store was closed.
var ErrClosed = errors.New("lease: store closed")

// Host is the host-wide store: every process that opens the same
// directory (klockd, embedded klock run sessions, tool gateways) decides
// against the same leases. The directory holds a lock file that is never
// replaced and a journal of JSON lines that only grows (until it is
// compacted). Each process keeps a Table that mirrors the journal and the
// offset it has read to; an operation takes the lock, reads what others
// appended, decides with the mirror, appends what it changed, and lets go
// of the lock. Records carry absolute times (a lease's ExpiresAt and
// Grace), so every process agrees on when a lease expires without one of
// them having to be there to expire it; whoever comes next journals it.
//
// Waiting (Await) works across processes: a waiter is queued in the
// journal, so the process that frees a lease grants it to the oldest
// waiter, whichever process waits; the waiting process hears of it through
// inotify on the directory (and a short recheck, should a notification be
// missed).
type Host struct {
	dir  string
	t    *Table
	cfg  hostConfig
	mu   sync.Mutex // the journal's file, offset and catching up, in this process
	lock *os.File   // dir/lock: flock(LOCK_EX) around every operation

	j    *os.File // the journal as this process has it open
	jID  fileID   // its inode
	off  int64    // bytes of j applied to t
	gen  uint64   // its generation (compactions since it was made)
	line int      // lines of j applied
	base int64    // size of the snapshot at its head (header included)
	// hist is how much of that snapshot is its history of ended leases
	// (0 when not known: a snapshot followed from its header).
	hist   int64
	reload bool  // t may differ from the journal: load it again
	bad    error // a corrupt journal: every operation says so

	chunk, rbuf []byte // readLocked's
	// An operation's records, encoded as they are applied (a record
	// names grants and entries the operation may change or reuse after
	// it): wbuf holds recs lines, or encErr says why not.
	wbuf   []byte
	recs   int
	encErr error
	sink   func(record) // h.encode

	split opSplit // op's time, by step

	okMu      sync.Mutex
	readsBack map[Resource]struct{} // journalable's

	watchOnce sync.Once
	watch     *watcher
	closed    bool
}

type hostConfig struct {
	tableOpts   []TableOption
	compactSize int64
	recheck     time.Duration
}

// HostOption configures a Host.
type HostOption func(*hostConfig)

// WithHostTable passes options to the Table each process keeps (WithClock
// in tests, WithEndedHistory).
func WithHostTable(opts ...TableOption) HostOption {
	return func(c *hostConfig) { c.tableOpts = append(c.tableOpts, opts...) }
}

// WithCompactSize makes the journal compacted once what was appended
// after its last snapshot is larger than n bytes (default 1 MiB) and than
// three times the snapshot's state (the snapshot less its history of
// ended leases) plus a quarter of its history. Every new process decodes
// the state and what was appended, record by record, but only copies the
// history (endedHistory), so the appended part is what a klock run's
// start pays; rewriting the state costs about what appending three times
// as much did, and the history less (a process that never read it writes
// its lines again as they were).
func WithCompactSize(n int64) HostOption { return func(c *hostConfig) { c.compactSize = n } }

// WithRecheck sets how often a waiter looks at the journal without being
// notified (default 1 s; inotify is what wakes it, this is a safety net).
func WithRecheck(d time.Duration) HostOption { return func(c *hostConfig) { c.recheck = d } }

const (
	lockName    = "lock"
	journalName = "journal"
)

var (
	_ Store   = (*Host)(nil)
	_ Awaiter = (*Host)(nil)
)

// OpenHost opens (making it if need be) the host store in dir. The
// directory must belong to this user and be writable by nobody else
// (0700; made so): whoever can write the journal can grant itself
// anything.
func OpenHost(dir string, opts ...HostOption) (*Host, error) {
	cfg := hostConfig{compactSize: 1 << 20, recheck: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("lease: host store: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("lease: host store: %w", err)
	}
	if err := checkPrivate(dir, true); err != nil {
		return nil, err
	}
	lock, err := openPrivate(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	h := &Host{dir: dir, t: NewTable(cfg.tableOpts...), cfg: cfg, lock: lock, reload: true, readsBack: map[Resource]struct{}{}}
	h.t.onDue = func() { _ = h.op(context.Background(), func(*Table, time.Time) {}) }
	h.sink = h.encode
	// Load the journal now, so that an unusable one is said at once.
	if err := h.op(context.Background(), func(*Table, time.Time) {}); err != nil {
		lock.Close()
		if h.j != nil {
			h.j.Close()
		}
		return nil, err
	}
	return h, nil
}

// checkPrivate refuses a store others could write to.
func checkPrivate(p string, dir bool) error {
	st, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("lease: host store: %w", err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case dir && !st.IsDir():
		return fmt.Errorf("lease: host store %s is not a directory", p)
	case !dir && !st.Mode().IsRegular():
		return fmt.Errorf("lease: host store file %s is not a regular file", p)
	case sys != nil && int(sys.Uid) != os.Geteuid():
		return fmt.Errorf("lease: host store %s belongs to uid %d, not to this user (%d): refusing leases anyone else can write", p, sys.Uid, os.Geteuid())
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("lease: host store %s is writable by others (%v): refusing leases anyone else can write; chmod go-w it", p, st.Mode().Perm())
	}
	return nil
}

func openPrivate(p string, flag int) (*os.File, error) {
	f, err := os.OpenFile(p, flag|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lease: host store: %w", err)
	}
	if err := checkPrivate(p, false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Dir returns the store's directory.
func (h *Host) Dir() string { return h.dir }

// op runs f on the mirror, under the lock, caught up with the journal,
// and journals what f changed before anyone hears of it.
func (h *Host) op(_ context.Context, f func(t *Table, now time.Time)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	if h.bad != nil {
		return h.bad
	}
	t0 := time.Now()
	if err := flock(h.lock, unix.LOCK_EX); err != nil {
		return fmt.Errorf("lease: host store lock: %w", err)
	}
	defer flock(h.lock, unix.LOCK_UN)
	t1 := time.Now()
	if err := h.catchUpLocked(true); err != nil {
		return err
	}
	t2 := time.Now()
	t := h.t
	t.mu.Lock()
	h.wbuf, h.recs, h.encErr = h.wbuf[:0], 0, nil
	t.sink = h.sink
	t.runLocked(t.now(), f)
	t.sink = nil
	t3 := time.Now()
	var err error
	if b := t.ended.bad; b != nil {
		err = h.corruptEnded(b) // f read a history the journal has wrong
	} else {
		err = h.appendLocked()
	}
	t.flushLocked(err == nil)
	t.armLocked()
	t.mu.Unlock()
	t4 := time.Now()
	h.split.add(t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3))
	if err != nil {
		h.reload = true // the mirror has what the journal has not
		return err
	}
	if tail := h.off - h.base; tail > h.cfg.compactSize && tail > 3*(h.base-h.hist)+h.hist/4 {
		// On failure the journal is whole; compacting waits for the
		// next operation.
		_ = h.compactLocked()
		h.split.compact += time.Since(t4)
	}
	return nil
}

// opSplit is where the host store's operations spent their time (under
// h.mu): the file lock, catching up with other processes' records,
// deciding, journaling, and compacting; the benchmark prints it.
type opSplit struct {
	n                                       int
	lock, catchUp, decide, journal, compact time.Duration
}

func (s *opSplit) add(lock, catchUp, decide, journal time.Duration) {
	s.n++
	s.lock += lock
	s.catchUp += catchUp
	s.decide += decide
	s.journal += journal
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

func (h *Host) recheck() time.Duration { return h.cfg.recheck }

// Acquire implements Store.
func (h *Host) Acquire(ctx context.Context, req Request) (Decision, error) {
	if err := h.journalable(req); err != nil {
		return Decision{}, err
	}
	return acquire(ctx, h, req)
}

// journalable refuses a claim whose object would not read back from the
// journal as the same resource: every process replays the journal, and a
// record none can decide would stop them all. The resources found to read
// back are remembered (it is a function of the resource alone): a session
// asks for the same ones again and again.
func (h *Host) journalable(req Request) error {
	h.okMu.Lock()
	defer h.okMu.Unlock()
	for i, c := range req.Claims {
		if _, ok := h.readsBack[c.Resource]; ok {
			continue
		}
		s := c.Resource.String()
		r, err := ParseResource(s)
		if err != nil {
			return fmt.Errorf("claim %d (%s): %w", i, c.Intent, err)
		}
		if r.String() != s {
			return fmt.Errorf("%w: claim %d (%s): its object %q reads back as %q", ErrInvalid, i, c.Intent, s, r.String())
		}
		if len(h.readsBack) >= maxReadsBack {
			clear(h.readsBack)
		}
		h.readsBack[c.Resource] = struct{}{}
	}
	return nil
}

const maxReadsBack = 4096

// Await implements Awaiter: the waiter is queued in the journal; any
// process that frees what it waits for grants it, oldest waiter first.
func (h *Host) Await(ctx context.Context, req Request, max time.Duration) (Decision, error) {
	if err := h.journalable(req); err != nil {
		return Decision{}, err
	}
	h.startWatch()
	return await(ctx, h, req, max)
}

// Check answers what Acquire would answer now, granting nothing (it may
// journal expiries that are due).
func (h *Host) Check(ctx context.Context, req Request) (Decision, error) { return check(ctx, h, req) }

// Heartbeat implements Store.
func (h *Host) Heartbeat(ctx context.Context, who Holder) (time.Time, error) {
	return heartbeat(ctx, h, who)
}

// Release implements Store.
func (h *Host) Release(ctx context.Context, who Holder, ids ...string) (int, error) {
	return release(ctx, h, who, ids)
}

// Revoke implements Store.
func (h *Host) Revoke(ctx context.Context, idOrSession string) (int, error) {
	return revoke(ctx, h, idOrSession)
}

// List implements Store.
func (h *Host) List(ctx context.Context, f Filter) ([]Lease, error) { return list(ctx, h, f) }

// Subscribe returns the events of every process on the store (in journal
// order, as this process reads it: at once for its own operations, within
// an inotify notification for the others'), like Table.Subscribe.
func (h *Host) Subscribe(buf int) (<-chan Event, func()) {
	h.startWatch()
	return h.t.Subscribe(buf)
}

// Close implements Store: the leases stay (a session that ends releases
// them first; one that dies lets them expire).
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	w := h.watch
	h.mu.Unlock()
	h.t.mu.Lock()
	h.t.onDue = nil
	if h.t.timer != nil {
		h.t.timer.Stop()
	}
	h.t.mu.Unlock()
	if w != nil {
		w.stop()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.lock.Close()
	if h.j != nil {
		err = errors.Join(err, h.j.Close())
	}
	return err
}
