package approval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/klocklabs/klock/internal/dirsync"
)

var (
	ErrNotFound = errors.New("no such approval request")
	ErrDecided  = errors.New("approval request already decided")
	ErrStore    = errors.New("approval store")
	// ErrUnreachable: the fleet's queue (etcd) did not answer. It wraps
	// ErrStore; nothing was filed or decided by the failed operation.
	ErrUnreachable = fmt.Errorf("%w: the fleet's approval queue is unreachable", ErrStore)
)

// Queue is an approval queue: Store (a directory, one host) and
// etcdqueue.Queue (a fleet's etcd) implement it with the same semantics.
type Queue interface {
	// Submit returns the open request for the same call (same
	// fingerprint, pending, or approved and not yet used) or files r.
	Submit(r Request, timeout time.Duration) (*Request, error)
	// Get returns a request, expiring it first when its deadline passed.
	Get(id string) (*Request, error)
	// Decide approves or denies a pending request, exactly once.
	Decide(id string, approve bool, by, note string) (*Request, error)
	// MarkUsed records that the approved call was dispatched.
	MarkUsed(id string) error
	// Wait blocks until the request is no longer pending, ctx ends, or
	// max passes, and returns what it saw last (possibly still Pending).
	Wait(ctx context.Context, id string, max time.Duration) (*Request, error)
	// List returns every request (pending first, then newest first);
	// with pendingOnly, only those still pending.
	List(pendingOnly bool) ([]*Request, error)
	// String names the queue for messages (a directory, or a fleet).
	String() string
}

var _ Queue = (*Store)(nil)

// State of a request.
type State string

const (
	Pending  State = "pending"
	Approved State = "approved"
	Denied   State = "denied"
	Expired  State = "expired" // the deadline passed: a denial
)

// Request is one call waiting for a human.
type Request struct {
	ID string `json:"id"`
	// Host is the fleet host whose gateway filed the request (empty in a
	// host's own queue directory).
	Host        string          `json:"host,omitempty"`
	Agent       string          `json:"agent"`
	RunID       string          `json:"run_id,omitempty"`
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args,omitempty"` // omitted in confidential mode
	ArgsSHA256  string          `json:"args_sha256"`
	Why         string          `json:"why"`
	Fingerprint string          `json:"fingerprint"` // the call it approves (tool + args + run)
	Created     time.Time       `json:"created"`
	Deadline    time.Time       `json:"deadline"`
	State       State           `json:"state"`
	DecidedBy   string          `json:"decided_by,omitempty"`
	DecidedAt   time.Time       `json:"decided_at,omitempty"`
	Note        string          `json:"note,omitempty"`
	// Used is set once the approved call was dispatched: an approval
	// covers one call, not every later call with the same arguments.
	Used bool `json:"used,omitempty"`
}

// Store is a queue directory.
type Store struct {
	dir  string
	now  func() time.Time
	poll time.Duration
}

// Option configures Open.
type Option func(*Store)

// WithClock sets the clock deadlines are judged by.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithPoll sets how often Wait looks at the request (default 50 ms).
func WithPoll(d time.Duration) Option { return func(s *Store) { s.poll = d } }

// Open opens (creating) the queue directory.
func Open(dir string, opts ...Option) (*Store, error) {
	s := &Store{dir: dir, now: time.Now, poll: 50 * time.Millisecond}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	// Probe writability now: an approval queue that cannot be written would
	// turn every escalation into a hang or a silent denial later.
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not writable: %v", ErrStore, dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return s, nil
}

// Dir is the queue directory.
func (s *Store) Dir() string { return s.dir }

// String names the queue for messages.
func (s *Store) String() string { return "queue " + s.dir }

func (s *Store) path(id string) string { return filepath.Join(s.dir, id+".json") }

// lock holds an exclusive flock on the queue for one read-modify-write.
func (s *Store) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// NewID is a fresh request id (ap_ and 12 hex digits).
func NewID() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("%w: %v", ErrStore, err)
	}
	return "ap_" + hex.EncodeToString(b[:]), nil
}

// ValidID: id has the shape of a request id (so it is safe in a path or
// a key).
func ValidID(id string) bool { return validID(id) }

func validID(id string) bool {
	if !strings.HasPrefix(id, "ap_") || len(id) != 15 {
		return false
	}
	_, err := hex.DecodeString(id[3:])
	return err == nil
}

func (s *Store) read(id string) (*Request, error) {
	if !validID(id) {
		return nil, fmt.Errorf("%w: %q (ids look like ap_0123456789ab)", ErrNotFound, id)
	}
	data, err := os.ReadFile(s.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	var r Request
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrStore, s.path(id), err)
	}
	return &r, nil
}

func (s *Store) write(r *Request) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrStore, err)
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), s.path(r.ID))
	}
	if err == nil {
		err = dirsync.Sync(s.dir)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("%w: %v", ErrStore, err)
	}
	return nil
}

// expire turns a pending request past its deadline into Expired.
func (s *Store) expire(r *Request) bool { return Expire(r, s.now()) }

// Expire turns r into Expired when it is pending and its deadline is not
// after now; it reports whether it did.
func Expire(r *Request, now time.Time) bool {
	if r.State == Pending && !now.Before(r.Deadline) {
		r.State, r.DecidedAt, r.DecidedBy, r.Note = Expired, now, "klock", "no decision before the deadline"
		return true
	}
	return false
}

// Open reports whether r still stands for its call: pending, or approved
// and not yet used (Submit's test for a retry of the same call).
func (r *Request) Open() bool { return r.State == Pending || r.State == Approved && !r.Used }

// decide sets r's decision (the caller checked that r is pending).
func (r *Request) decide(approve bool, by, note string, now time.Time) {
	r.State, r.DecidedBy, r.DecidedAt, r.Note = Denied, by, now, note
	if approve {
		r.State = Approved
	}
}

// Decision applies a human's decision to r: ErrDecided (with r as it
// stands) when r is not pending, after expiring it at now.
func Decision(r *Request, approve bool, by, note string, now time.Time) error {
	Expire(r, now)
	if r.State != Pending {
		return fmt.Errorf("%w: %s is %s", ErrDecided, r.ID, r.State)
	}
	r.decide(approve, by, note, now)
	return nil
}

// Sort orders requests as List returns them: pending first, then newest
// first.
func Sort(out []*Request) {
	sort.Slice(out, func(i, j int) bool {
		if (out[i].State == Pending) != (out[j].State == Pending) {
			return out[i].State == Pending
		}
		return out[i].Created.After(out[j].Created)
	})
}

// Submit returns the open request for the same call (same fingerprint,
// pending, or approved and not yet used) or files a new one. An agent that
// retries a call waiting for approval thus waits on the same request.
func (s *Store) Submit(r Request, timeout time.Duration) (*Request, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := s.list()
	if err != nil {
		return nil, err
	}
	for _, old := range all {
		if old.Fingerprint == r.Fingerprint && old.Open() {
			if s.expire(old) {
				if err := s.write(old); err != nil {
					return nil, err
				}
				continue
			}
			return old, nil
		}
	}
	if r.ID, err = NewID(); err != nil {
		return nil, err
	}
	r.Created = s.now()
	r.Deadline = r.Created.Add(timeout)
	r.State = Pending
	if err := s.write(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Get returns a request, expiring it first when its deadline passed.
func (s *Store) Get(id string) (*Request, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	r, err := s.read(id)
	if err != nil {
		return nil, err
	}
	if s.expire(r) {
		if err := s.write(r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Decide approves or denies a pending request.
func (s *Store) Decide(id string, approve bool, by, note string) (*Request, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	r, err := s.read(id)
	if err != nil {
		return nil, err
	}
	was := r.State
	if err := Decision(r, approve, by, note, s.now()); err != nil {
		if r.State != was {
			if werr := s.write(r); werr != nil {
				return nil, werr
			}
		}
		return r, err
	}
	return r, s.write(r)
}

// MarkUsed records that the approved call was dispatched.
func (s *Store) MarkUsed(id string) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	r, err := s.read(id)
	if err != nil {
		return err
	}
	r.Used = true
	return s.write(r)
}

// Wait polls the request until it is no longer pending, ctx ends, or max
// passes, and returns what it saw last (possibly still Pending).
func (s *Store) Wait(ctx context.Context, id string, max time.Duration) (*Request, error) {
	end := s.now().Add(max)
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		r, err := s.Get(id)
		if err != nil || r.State != Pending || !s.now().Before(end) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, nil
		case <-t.C:
		}
	}
}

// List returns every request (pending first, then newest first); with
// pendingOnly, only those still pending.
func (s *Store) List(pendingOnly bool) ([]*Request, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := s.list()
	if err != nil {
		return nil, err
	}
	var out []*Request
	for _, r := range all {
		if s.expire(r) {
			if err := s.write(r); err != nil {
				return nil, err
			}
		}
		if !pendingOnly || r.State == Pending {
			out = append(out, r)
		}
	}
	Sort(out)
	return out, nil
}

func (s *Store) list() ([]*Request, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	var out []*Request
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".json") || strings.HasPrefix(n, ".") {
			continue
		}
		r, err := s.read(strings.TrimSuffix(n, ".json"))
		if err != nil {
			continue // a foreign file in the queue is not a request
		}
		out = append(out, r)
	}
	return out, nil
}
