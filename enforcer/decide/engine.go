package decide

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// Engine decides events against a ruleset and keeps the session's records.
// It is safe for concurrent use.
type Engine struct {
	mu       sync.Mutex
	mode     policy.Mode
	rs       *policy.Ruleset
	index    map[*policy.Intent]int // intent pointer -> index in rs.Intents
	now      func() time.Time
	log      *slog.Logger
	base     int // number of intents in the initial ruleset
	uses     []uint64
	obs      map[policy.Triple]*Observation
	viol     []Violation
	amend    []Amendment
	lost     []LostRecord
	lostN    uint64
	events   uint64
	create   *createdSet
	kill     *Verdict
	learnMin int
	// refuses says whether a kernel wall, not the file's permissions,
	// refused an operation (WithWall); refused holds the declared
	// operations it refused, by triple.
	refuses func(ev event.Event, t policy.Triple) bool
	// exactWall: WithExactWall.
	exactWall func(ev event.Event) bool
	refused   map[policy.Triple]*Refusal
	// names are the answers to the agent's name lookups, by source
	// (Lookup); nameServers its resolver's servers. For --learn only.
	names       map[NameSource]map[netip.Addr][]string
	nameServers []netip.Addr
	// gate grants or refuses permissive amendments (WithAmendGate).
	gate AmendGate
	// otherNames are the pre-session names sharing a file's inode
	// (WithOtherNames); nil when unknown.
	otherNames func(path string) []string
	// hidden: WithHiddenNames.
	hidden func(path string) (n int, fsRoot string)
	// aliases are the names the session gave existing inodes: each new
	// name (a hard link's, a rename's destination) with the names its
	// inode had (refer; Records.Aliases).
	aliases map[string][]string
	// counted are the directories whose reads a backend counts instead
	// of reporting (CountFrom), by directory.
	counted map[string]*CountedReads
	// below is the ruleset's answer for every read below a directory
	// (CountFrom), kept until the ruleset changes: a session whose
	// scope cannot be counted asks at each read the workdir has.
	below belowAnswer
}

// belowAnswer is policy.Ruleset.AllowsBelow's answer for reads below dir.
type belowAnswer struct {
	known bool
	dir   string
	d     policy.Decision
	same  bool
}

// Option configures an Engine.
type Option func(*Engine)

// WithClock sets the clock used for events and losses without a time.
func WithClock(now func() time.Time) Option { return func(e *Engine) { e.now = now } }

// WithLogger sets the logger for violations, amendments and losses
// (default: discard).
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithWall tells the engine how to tell the session's own walls' refusals
// from the system's: refuses(ev, t) reports whether the refused operation
// ev (on its triple t) was refused by klock's wall. A declared operation
// klock's wall refused is recorded as a Refusal: not the agent's
// violation, and not a clean session either (see Records.Refused).
// Without it no refusal is recorded.
func WithWall(refuses func(ev event.Event, t policy.Triple) bool) Option {
	return func(e *Engine) { e.refuses = refuses }
}

// WithExactWall tells the engine which operations whose name could not be
// read (event.Event.NameUnread) a kernel wall let through exactly as
// declared: exact(ev) reports whether every operation like ev the wall
// allows is one the manifest declares, so it needs no name to be allowed.
// Without it such an operation is judged on its empty name (a violation),
// unless it failed without the wall and so changed nothing.
func WithExactWall(exact func(ev event.Event) bool) Option {
	return func(e *Engine) { e.exactWall = exact }
}

// WithHiddenNames tells the engine how many names each file had before
// the session that the pre-flight backup did not find (a hard link from
// outside its scopes), and the root of the file system they lie on: a
// write through a declared name changes the file by those too, which no
// manifest short of that whole file system declares and nothing can roll
// back (refer.go).
func WithHiddenNames(f func(path string) (n int, fsRoot string)) Option {
	return func(e *Engine) { e.hidden = f }
}

// WithOtherNames tells the engine the other names each file's inode had
// before the session (a hard-link group of the pre-flight backup): a
// write through one name changes the file by all of them, so it is
// judged against each (refer.go).
func WithOtherNames(f func(path string) []string) Option {
	return func(e *Engine) { e.otherNames = f }
}

// New returns an engine for the compiled (and, for host names, resolved)
// ruleset. mode is the session's effective mode (the CLI may override the
// manifest's); anything but permissive is strict (fail closed).
func New(rs *policy.Ruleset, mode policy.Mode, opts ...Option) *Engine {
	if mode != policy.ModePermissive {
		mode = policy.ModeStrict
	}
	e := &Engine{
		mode:   mode,
		now:    time.Now,
		log:    slog.New(slog.DiscardHandler),
		obs:    map[policy.Triple]*Observation{},
		create: newCreatedSet(),
	}
	for _, o := range opts {
		o(e)
	}
	e.setRuleset(rs)
	e.base = len(rs.Intents)
	return e
}

func (e *Engine) setRuleset(rs *policy.Ruleset) {
	e.rs = rs
	e.below = belowAnswer{}
	e.index = make(map[*policy.Intent]int, len(rs.Intents))
	for i := range rs.Intents {
		e.index[&rs.Intents[i]] = i
	}
	for len(e.uses) < len(rs.Intents) {
		e.uses = append(e.uses, 0)
	}
}

// Mode is the effective mode.
func (e *Engine) Mode() policy.Mode { return e.mode }

// Ruleset returns the current ruleset (with every lease in permissive mode).
func (e *Engine) Ruleset() *policy.Ruleset {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rs
}

// Terminated returns the first kill verdict, or nil while the session may go on.
func (e *Engine) Terminated() *Verdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kill == nil {
		return nil
	}
	v := *e.kill
	return &v
}

// Observe decides one event. Both the event's triple and its Extra are
// checked; the verdict describes the first violation found, else the main
// triple. An event is recorded whatever its verdict.
func (e *Engine) Observe(ev event.Event) Verdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ev.Time.IsZero() {
		ev.Time = e.now()
	}
	e.events += 1 + ev.Repeat
	v := e.decide(ev, ev.Triple)
	// An exec's Extra is the CONSUMES FILE of its binary; the ruleset
	// grants reading whatever a PROC intent lets run (policy.Compile).
	if ev.Extra.Type != 0 {
		if x := e.decide(ev, ev.Extra); x.Violation() && !v.Violation() {
			v = x
		}
		// A link or rename must not give the inode rights none of its
		// names had (refer.go).
		if x := e.refer(ev); x.Violation() && !v.Violation() {
			v = x
		}
	}
	if x := e.throughLinks(ev); x.Violation() && !v.Violation() {
		v = x
	}
	// The operation took effect (allowed, or allowed by a fresh lease):
	// track what it created, moved or removed.
	if (v.Action == ActionAllow || v.Action == ActionAmended) && ev.Errno == 0 && !ev.Blocked {
		e.create.update(ev)
	}
	return v
}

// Created reports whether the session created path and still owns it.
func (e *Engine) Created(path string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.create.paths[path]
	return ok
}

// Repeated adds operations a backend counted in the kernel instead of
// reporting again (ev stands for 1 + ev.Repeat of them; sessions hand them
// over at their end) to the observation of their first report, under the
// verdict that report got: it returns ActionAllow and never kills.
//
// The kernel counts an operation as a repeat only when it is the same
// operation on the same object by the same name as one it reported (same
// dentry, inode and generation, open flags, and no rename since), so what
// was decided for the first holds for each repeat. Deciding them again at
// the end of the session judged them against the end's state instead: a
// file the agent created, wrote to twice and removed was no longer
// "created by the session" by then, and a strict session that had done
// nothing wrong was killed and rolled back after its agent exited. A
// repeat whose first report was never judged (or that carries a second
// triple) is decided as Observe decides it.
func (e *Engine) Repeated(ev event.Event) Verdict {
	e.mu.Lock()
	o := e.obs[ev.Triple]
	if o == nil || ev.Extra.Type != 0 {
		e.mu.Unlock()
		return e.Observe(ev)
	}
	defer e.mu.Unlock()
	n := 1 + ev.Repeat
	e.events += n
	o.Count += n
	v := Verdict{Triple: ev.Triple, Created: o.Created}
	if o.Intent >= 0 && o.Intent < len(e.rs.Intents) && o.Intent < len(e.uses) {
		e.uses[o.Intent] += n
		v.Intent = &e.rs.Intents[o.Intent]
	}
	return v
}

// decide judges one triple of an event and records it.
func (e *Engine) decide(ev event.Event, t policy.Triple) Verdict { return e.decideAs(ev, t, "", false) }

// decideAs is decide for a triple the event reached through another name
// of its object (via, for the log: refer.go), or directly (via "").
func (e *Engine) decideAs(ev event.Event, t policy.Triple, via string, referred bool) Verdict {
	o := e.observation(ev, t, referred)
	v := Verdict{Triple: t, Blocked: ev.Blocked}
	d := e.rs.Allows(t)
	switch {
	case ev.Unnamed && t == ev.Triple:
		// A file with no name (an unlinked temporary file, O_TMPFILE):
		// pytest's output capture truncates one. No scope is about it:
		// no one else can reach it, nothing of it outlives the process,
		// and giving it a name again (linkat) is judged then.
		o.Unnamed, v.Unnamed = true, true
		return v
	case ev.NameUnread && ev.Errno != 0 && !ev.Blocked:
		// Failed, not by a wall: it changed nothing, and nothing
		// names what it tried.
		return v
	case ev.NameUnread && !ev.Blocked && e.exactWall != nil && e.exactWall(ev):
		// The wall judged the kernel's copy of the name and lets through
		// only what the manifest declares for such an operation.
		o.WallExact, v.WallExact = true, true
		return v
	case d.Allowed:
		i := e.index[d.Intent]
		e.uses[i] += 1 + ev.Repeat
		o.Intent, v.Intent = i, d.Intent
		v.Refused = e.refusal(ev, t, d.Intent.String())
		return v
	case e.create.allows(t):
		o.Created, v.Created = true, true
		v.Refused = e.refusal(ev, t, "created by the session")
		return v
	case absent(ev, t):
		// Nothing was there: the kernel touched no object (a shell trying
		// each PATH directory, a probe for an optional config file). The
		// attempt stays in the log as a failed observation.
		return v
	case existed(ev, t):
		// Something was already there: mkdir -p and install -d making
		// each directory of a path (/srv, /srv/prefix), an O_EXCL lock
		// file another process holds, a link whose name is taken. The
		// kernel answers EEXIST from its lookup, before any wall's hook,
		// and made or changed nothing.
		return v
	}
	v.Err = d.Violation(t)
	v.Err.Via = via
	o.Violation = true
	rec := Violation{
		Time: ev.Time, Triple: t, Via: via, PID: ev.PID, Comm: ev.Comm, Syscall: ev.Syscall,
		Source: ev.Source, Errno: ev.Errno, Blocked: ev.Blocked,
		Declared: d.Declared, Error: v.Err.Error(), Needed: v.Err.Needed(),
	}
	if e.mode == policy.ModeStrict {
		v.Action = ActionKill
		if e.kill == nil {
			v.First = true
			k := v
			e.kill = &k
		}
		rec.Action = v.Action
		e.viol = append(e.viol, rec)
		e.log.Error("scope violation: killing the session", "violation", v.Err.Error(), "pid", ev.PID, "comm", ev.Comm, "blocked", ev.Blocked)
		return v
	}
	// Permissive: Dynamic Lease Acquisition.
	v.Action = ActionAmended
	if ev.Blocked {
		v.Action = ActionBlocked
	}
	rec.Action = v.Action
	if lease, ok := leaseFor(t); ok {
		rs, err := e.rs.With(lease)
		var ans AmendAnswer
		if err == nil {
			// Only an amendment that can be made is asked for: a lease
			// granted for nothing would be held all session.
			ans = e.askGate(ev, t, lease)
		}
		switch {
		case err != nil:
			rec.LeaseError = err.Error()
		case !ans.Granted:
			// Another holder's lease: the scope does not grow, and a
			// wall that refused the operation goes on refusing it.
			v.Action, v.LeaseError = ActionLeaseDenied, ans.Why
			rec.Action, rec.LeaseError, rec.Conflicts = v.Action, ans.Why, ans.Conflicts
			e.viol = append(e.viol, rec)
			e.log.Warn("scope violation: amendment not granted (permissive)", "violation", v.Err.Error(), "why", ans.Why, "pid", ev.PID, "comm", ev.Comm, "blocked", ev.Blocked)
			return v
		default:
			e.setRuleset(rs)
			i := len(rs.Intents) - 1
			v.Lease = &rs.Intents[i]
			o.Intent = i
			e.uses[i]++
			rec.Lease = v.Lease.String()
			e.amend = append(e.amend, Amendment{
				Time: ev.Time, Intent: *v.Lease, Triple: t, PID: ev.PID, Comm: ev.Comm,
				Syscall: ev.Syscall, Blocked: ev.Blocked,
			})
		}
	} else {
		rec.LeaseError = "no exact intent expresses " + t.String()
	}
	e.viol = append(e.viol, rec)
	e.log.Warn("scope violation: amending the scope (permissive)", "violation", v.Err.Error(), "lease", rec.Lease, "pid", ev.PID, "comm", ev.Comm, "blocked", ev.Blocked)
	return v
}

// refusal records ev as a declared operation (allowed by what) that
// klock's wall refused, when it was refused and the wall says it was its
// doing; it reports whether it did.
func (e *Engine) refusal(ev event.Event, t policy.Triple, by string) bool {
	if !ev.Blocked || e.refuses == nil || !e.refuses(ev, t) {
		return false
	}
	if r := e.refused[t]; r != nil {
		r.Count += 1 + ev.Repeat
		return true
	}
	if e.refused == nil {
		e.refused = map[policy.Triple]*Refusal{}
	}
	e.refused[t] = &Refusal{Time: ev.Time, Triple: t, AllowedBy: by, PID: ev.PID, Comm: ev.Comm,
		Syscall: ev.Syscall, Source: ev.Source, Errno: ev.Errno, Count: 1 + ev.Repeat}
	e.log.Error("klock's wall refused a declared operation", "triple", t.String(), "declared by", by, "pid", ev.PID, "comm", ev.Comm)
	return true
}

func (e *Engine) observation(ev event.Event, t policy.Triple, referred bool) *Observation {
	o := e.obs[t]
	if o == nil {
		o = &Observation{Triple: t, First: ev.Time, PID: ev.PID, Comm: ev.Comm, Syscall: ev.Syscall, Source: ev.Source, Intent: -1,
			Tmpfile: ev.Tmpfile && t == ev.Triple, Referred: referred}
		e.obs[t] = o
	}
	o.Referred = o.Referred && referred
	o.Count += 1 + ev.Repeat
	o.Last = ev.Time
	// Only unnamed files made there: a mkdir of the same directory is
	// its creation, which the learner must still see as one.
	o.Tmpfile = o.Tmpfile && ev.Tmpfile && t == ev.Triple
	if ev.Blocked {
		o.Blocked++
	}
	// EINPROGRESS: a non-blocking connect that is under way, not a failure.
	if ev.Errno != 0 && ev.Errno != int32(syscall.EINPROGRESS) {
		o.Failed++
	}
	return o
}

// Lost records events the kernel could not deliver. Strict: ActionKill
// (fail closed: what was lost may have been a violation). Permissive:
// recorded, ActionAllow.
func (e *Engine) Lost(l event.Lost) Verdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.Time.IsZero() {
		l.Time = e.now()
	}
	e.lostN += l.Count
	v := Verdict{}
	rec := LostRecord{Time: l.Time, Count: l.Count}
	if e.mode == policy.ModeStrict {
		v.Action = ActionKill
		v.Reason = fmt.Sprintf("klock lost %d kernel event(s) (%d in total): an unseen operation may have left the scope; strict mode fails closed and ends the session", l.Count, e.lostN)
		if e.kill == nil {
			v.First = true
			k := v
			e.kill = &k
		}
		e.log.Error("lost events: killing the session", "count", l.Count, "total", e.lostN)
	} else {
		e.log.Warn("lost events (permissive: recorded, the verification log is incomplete)", "count", l.Count, "total", e.lostN)
	}
	rec.Action = v.Action
	e.lost = append(e.lost, rec)
	return v
}

// leaseFor is the exact intent that allows t, for permissive amendments.
func leaseFor(t policy.Triple) (policy.Intent, bool) {
	in := policy.Intent{Predicate: t.Predicate, Origin: "lease", Reason: "dynamic lease acquisition"}
	switch t.Type {
	case policy.ObjFile, policy.ObjProc:
		if t.Path == "" || t.Path[0] != '/' {
			return in, false
		}
		if t.Type == policy.ObjProc && t.Predicate != policy.Provides {
			return in, false
		}
		in.Object = policy.Object{Type: t.Type, Path: policy.PathPattern{Path: t.Path, Match: policy.MatchExact}}
	case policy.ObjNet:
		n, ok := netPatternFor(t)
		if !ok {
			return in, false
		}
		in.Object = policy.Object{Type: policy.ObjNet, Net: n}
	default:
		return in, false
	}
	return in, true
}

// netPatternFor is the exact NET pattern of a NET triple.
func netPatternFor(t policy.Triple) (policy.NetPattern, bool) {
	if t.Raw {
		return policy.NetPattern{Raw: true}, true
	}
	port := t.Addr.Port()
	n := policy.NetPattern{Ports: policy.PortRange{Lo: port, Hi: port}, Proto: t.Proto}
	switch {
	case t.Host != "":
		n.Host = t.Host
	case t.Addr.Addr().IsValid():
		a := t.Addr.Addr().Unmap()
		if a.Zone() != "" {
			a = a.WithZone("")
		}
		n.Prefix = netipPrefix(a)
	default:
		return n, false
	}
	return n, true
}

// existed reports whether a file operation failed because the name it
// would have made already exists (EEXIST: mkdir, mknod, symlink, link,
// open with O_CREAT|O_EXCL, a rename with RENAME_NOREPLACE). The kernel
// returns it from the path lookup, before any LSM hook (Landlock's or
// bpf-lsm's) is asked, so no wall could have refused it either: the
// operation had no effect, on any object. Like absent, the attempt stays
// in the log as a failed observation and tells the agent no more than a
// stat of the path would.
func existed(ev event.Event, t policy.Triple) bool {
	if t.Type != policy.ObjFile || !strings.HasPrefix(t.Path, "/") {
		return false
	}
	return ev.Errno == int32(syscall.EEXIST) && !ev.Blocked
}

// absent reports whether a file or exec operation failed because its
// resolved, absolute path does not exist (ENOENT, ENOTDIR).
func absent(ev event.Event, t policy.Triple) bool {
	if t.Type != policy.ObjFile && t.Type != policy.ObjProc {
		return false
	}
	if t.Path == "" {
		// The empty name: the kernel refuses it with ENOENT before any
		// lookup (open(""), a language runtime probing), so there is
		// nothing it could have named.
		return ev.Errno == int32(syscall.ENOENT)
	}
	if !strings.HasPrefix(t.Path, "/") {
		return false // unresolved: fail closed
	}
	return ev.Errno == int32(syscall.ENOENT) || ev.Errno == int32(syscall.ENOTDIR)
}
