package decide

import (
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

func netipPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// Observation is one distinct observed triple.
type Observation struct {
	Triple policy.Triple
	Count  uint64 // times observed
	// Blocked counts attempts a kernel mechanism refused; Failed counts
	// attempts that returned an error (blocked or not).
	Blocked, Failed uint64
	// First occurrence.
	First   time.Time
	PID     uint32
	Comm    string
	Syscall string
	Source  event.Source
	Last    time.Time
	// Intent is the index in Records.Intents of the intent that allowed it
	// (the latest one: a lease after an amendment); -1 when none did.
	Intent int
	// Created is true when it was allowed because the session created the file.
	Created bool
	// Unnamed is true when it was allowed because the file had no name
	// left (event.Event.Unnamed).
	Unnamed bool
	// WallExact is true when it was allowed, its name unread, because the
	// wall let it through exactly as declared (WithExactWall).
	WallExact bool
	// Violation is true when at least one occurrence was outside the scope.
	Violation bool
	// Tmpfile is true when every occurrence was an O_TMPFILE open's
	// PROVIDES of the directory the unnamed file was made in
	// (event.Event.Tmpfile), none the directory's own making.
	Tmpfile bool
	// Referred is true when every occurrence was the judgement of a right
	// an operation on another name needed (refer.go): the rights a link or
	// rename would give the inode at this name by its new one, or a write
	// through a file with names the backup did not find, judged on the
	// file system they lie on. It changed nothing at this name; what the
	// agent did is the other name's own observation (Records.Aliases ties
	// a link's two).
	Referred bool
	// Hidden is true when it judged a write through a file with names the
	// backup did not find (refer.go's throughHidden): its path is where
	// they lie, not a path any run declares (--learn lists it, unlearned).
	Hidden bool
}

// Violation is one triple observed outside the scope.
type Violation struct {
	Time   time.Time
	Triple policy.Triple
	// Via is the other name the operation reached the file through (a
	// hard link or rename giving its inode new rights), "" when direct.
	Via      string
	PID      uint32
	Comm     string
	Syscall  string
	Source   event.Source
	Errno    int32
	Blocked  bool
	Declared policy.Access // what the scope declares on the object
	Error    string        // the ScopeViolationError text
	Needed   string        // the intent that would have allowed it
	Action   Action
	// Lease is the amendment made for it (permissive), LeaseError why none could be.
	Lease      string
	LeaseError string
	// Conflicts are the other holders' leases that refused its amendment
	// (ActionLeaseDenied).
	Conflicts []LeaseConflict
}

// Amendment is one Dynamic Lease Acquisition.
type Amendment struct {
	Time    time.Time
	Intent  policy.Intent
	Triple  policy.Triple
	PID     uint32
	Comm    string
	Syscall string
	Blocked bool
}

// Refusal is one declared operation (or one on a file the session made)
// that a wall of klock's refused: klock failed to allow what the manifest
// declares. It is not the agent's violation, and the session is not clean.
type Refusal struct {
	Time      time.Time
	Triple    policy.Triple
	AllowedBy string // the intent that declares it, or "created by the session"
	PID       uint32
	Comm      string
	Syscall   string
	Source    event.Source
	Errno     int32
	Count     uint64
}

// LostRecord is one report of lost kernel events.
type LostRecord struct {
	Time   time.Time
	Count  uint64
	Action Action
}

// Records is a snapshot of what the engine decided, for the verification log.
type Records struct {
	Mode policy.Mode
	// Intents are the current ruleset's intents: the manifest's, then the
	// baseline's, then leases (Origin says which). Uses[i] counts the
	// triple occurrences Intents[i] allowed.
	Intents []policy.Intent
	Uses    []uint64
	// Initial is the number of intents before any amendment.
	Initial int
	// Observed is deduplicated, ordered by first occurrence.
	Observed   []Observation
	Violations []Violation
	Amendments []Amendment
	Lost       []LostRecord
	LostTotal  uint64
	Events     uint64
	// Refused are the declared operations klock's wall refused, in the
	// order they first happened.
	Refused []Refusal
	// Aliases are the names the session gave existing inodes (a hard
	// link, a rename's destination, that took effect): each new name with
	// the names its inode had. A change through the new name is a change
	// of the file at the old ones.
	Aliases map[string][]string
	// Created are the paths the session created and still owns, sorted.
	Created []string
	// Counted are the reads a backend counted by directory instead of
	// reporting them (CountFrom), by first use; Observed holds the read
	// that started each.
	Counted []CountedReads
	// Kill is the first kill verdict, nil when the session was not killed by klock.
	Kill *Verdict
}

// Records returns a copy of the engine's records.
func (e *Engine) Records() Records {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := Records{
		Mode:       e.mode,
		Intents:    append([]policy.Intent(nil), e.rs.Intents...),
		Uses:       append([]uint64(nil), e.uses[:len(e.rs.Intents)]...),
		Initial:    e.base,
		Violations: append([]Violation(nil), e.viol...),
		Amendments: append([]Amendment(nil), e.amend...),
		Lost:       append([]LostRecord(nil), e.lost...),
		LostTotal:  e.lostN,
		Events:     e.events,
	}
	// Sorted as pointers, copied once in order: a session can have tens of
	// thousands (sort.Slice swapped the structs through reflection).
	byFirst := make([]*Observation, 0, len(e.obs))
	for _, o := range e.obs {
		byFirst = append(byFirst, o)
	}
	slices.SortFunc(byFirst, func(a, b *Observation) int {
		if c := a.First.Compare(b.First); c != 0 {
			return c
		}
		return strings.Compare(a.Triple.String(), b.Triple.String())
	})
	r.Observed = make([]Observation, len(byFirst))
	for i, o := range byFirst {
		r.Observed[i] = *o
	}
	for _, x := range e.refused {
		r.Refused = append(r.Refused, *x)
	}
	slices.SortFunc(r.Refused, func(a, b Refusal) int { return a.Time.Compare(b.Time) })
	r.Created = e.create.all()
	sort.Strings(r.Created)
	if len(e.aliases) > 0 {
		r.Aliases = make(map[string][]string, len(e.aliases))
		for k, v := range e.aliases {
			r.Aliases[k] = slices.Clone(v)
		}
	}
	r.Counted = e.countedRecords()
	if e.kill != nil {
		k := *e.kill
		r.Kill = &k
	}
	return r
}

// Unused returns the indexes of manifest intents (Origin "manifest") that
// allowed nothing: KLIS-6 §4 under-utilization.
func (r Records) Unused() []int {
	var out []int
	for i := 0; i < r.Initial && i < len(r.Intents); i++ {
		if r.Uses[i] == 0 && isManifest(r.Intents[i]) {
			out = append(out, i)
		}
	}
	return out
}

func isManifest(in policy.Intent) bool {
	return in.Origin == "" || in.Origin == "manifest"
}

// IsBaseline reports whether an intent comes from a baseline.
func IsBaseline(in policy.Intent) bool { return strings.HasPrefix(in.Origin, "baseline:") }
