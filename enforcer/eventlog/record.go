package eventlog

import (
	"time"
	"unicode/utf8"
)

// SchemaVersion is every record's "v". A change that removes or renames a
// field, or changes a field's meaning, makes a new version and a new
// schema; a new optional field or kind does not.
const SchemaVersion = 1

// SchemaID is the published schema's $id.
const SchemaID = "https://klock.dev/schemas/events/v1.json"

// Kind says what a record reports, and which of its parts are set.
type Kind string

// Record kinds. The schema lists them; a reader ignores a kind it does
// not know (a newer klock may add kinds within one SchemaVersion).
const (
	KindSessionStart Kind = "session.start" // Start
	KindSessionEnd   Kind = "session.end"   // End
	// KindViolation: an operation outside the scope (Op, Violation).
	KindViolation Kind = "violation"
	// KindRefused: klock's own wall refused an operation the scope
	// declares (Op): not the agent's violation, and not a clean run.
	KindRefused  Kind = "refused"
	KindKill     Kind = "kill"     // Reason
	KindRollback Kind = "rollback" // Rollback: one step of a strict kill's undo
	// KindDNSRefused: the session's DNS proxy refused a name (Op).
	KindDNSRefused  Kind = "dns.refused"
	KindLeaseGrant  Kind = "lease.grant"  // Lease
	KindLeaseWait   Kind = "lease.wait"   // Lease (the conflict)
	KindLeaseDie    Kind = "lease.die"    // Lease (the conflict)
	KindLeaseRevoke Kind = "lease.revoke" // Lease
	// Guard (tool gateway) records: Tool.
	KindApprovalAsked Kind = "approval.asked"
	KindApprovalGiven Kind = "approval.given"
	KindBudgetRefused Kind = "budget.refused"
	KindToolDenied    Kind = "tool.denied"
	// KindObserved: one observed triple the scope allows (Op); only for
	// readers that asked for them (klock events --all).
	KindObserved Kind = "observed"
	// KindLost: this reader missed Lost records here (it read too
	// slowly).
	KindLost Kind = "lost"
)

// Kinds lists every kind, in the order the schema does.
var Kinds = []Kind{KindSessionStart, KindSessionEnd, KindViolation, KindRefused, KindKill, KindRollback,
	KindDNSRefused, KindLeaseGrant, KindLeaseWait, KindLeaseDie, KindLeaseRevoke,
	KindApprovalAsked, KindApprovalGiven, KindBudgetRefused, KindToolDenied, KindObserved, KindLost}

// Record is one event. Seq numbers the records of one hub (klockd's, or
// one embedded klock run's) from 1: a gap a reader sees is a KindLost
// record, never a silent jump.
type Record struct {
	V    int       `json:"v"`
	Seq  uint64    `json:"seq,omitempty"`
	Time time.Time `json:"time"`
	Kind Kind      `json:"kind"`
	// Source is who reported it: "klockd", "klock run" (embedded), or a
	// peer's report through klockd ("peer uid:1000"), which klockd labels
	// so that it cannot pass as its own.
	Source  string `json:"source,omitempty"`
	Session string `json:"session,omitempty"`
	Agent   string `json:"agent,omitempty"`
	Mode    string `json:"mode,omitempty"`
	// Owner is the uid whose session or lease it is ("uid:1000"): a
	// reader who is not root sees only its own.
	Owner string `json:"owner,omitempty"`

	Start     *Start     `json:"start,omitempty"`
	End       *End       `json:"end,omitempty"`
	Op        *Op        `json:"op,omitempty"`
	Violation *Violation `json:"violation,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Rollback  *Rollback  `json:"rollback,omitempty"`
	Lease     *Lease     `json:"lease,omitempty"`
	Tool      *Tool      `json:"tool,omitempty"`
	Lost      uint64     `json:"lost,omitempty"`
}

// Start is a session's start.
type Start struct {
	PID     int      `json:"pid,omitempty"`
	Command []string `json:"command,omitempty"` // at most maxList arguments
}

// End is how a session ended.
type End struct {
	// Verdict is the verification log's headline verdict, lower case:
	// clean, violation, amended, refused, killed (klock ended it without
	// a violation, or it was interrupted: see Interrupted).
	Verdict     string `json:"verdict"`
	Exit        string `json:"exit"`
	Killed      bool   `json:"killed"`
	Interrupted bool   `json:"interrupted,omitempty"`
	Violations  int    `json:"violations"`
	LogPath     string `json:"log_path,omitempty"`
}

// Op is one operation: its triple and who did it.
type Op struct {
	Predicate string `json:"predicate"`
	Object    string `json:"object"` // FILE:/p, PROC:/p, NET:host:port/proto
	PID       uint32 `json:"pid,omitempty"`
	Comm      string `json:"comm,omitempty"`
	Syscall   string `json:"syscall,omitempty"`
	// Blocked: a kernel wall refused it before it had any effect.
	Blocked bool `json:"blocked,omitempty"`
}

// Violation is what the decision engine made of an operation outside the
// scope.
type Violation struct {
	// Action: violation-kill (strict), violation-blocked, amended or
	// violation-lease-denied (permissive).
	Action string `json:"action"`
	Error  string `json:"error"`
	// Needed is the intent that would have allowed it.
	Needed string `json:"needed,omitempty"`
}

// Rollback is one step of a rollback.
type Rollback struct {
	Path   string `json:"path"`
	Action string `json:"action"` // restored | removed | recreated | spared | left
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	Why    string `json:"why,omitempty"`
}

// Lease is one lease decision.
type Lease struct {
	ID        string `json:"id,omitempty"`
	Predicate string `json:"predicate,omitempty"`
	Object    string `json:"object,omitempty"`
	// Holder is the conflicting lease's session (wait, die), or who
	// revoked (revoke).
	Holder string `json:"holder,omitempty"`
	// Count: grant: leases granted; revoke: leases freed.
	Count int `json:"count,omitempty"`
	// Leases are a grant's, "ID PREDICATE OBJECT" each (at most maxList).
	Leases []string `json:"leases,omitempty"`
}

// Tool is a gateway's tool call decision.
type Tool struct {
	Name     string `json:"name"`
	Call     string `json:"call,omitempty"`
	Approver string `json:"approver,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Bounds: a record is at most a few KiB whatever the agent names. Strings
// come from the agent (file names, comm, argv), so they are cut.
const (
	maxString = 4096
	maxList   = 64
)

// clip bounds r's strings and lists. It copies what r points to before
// it cuts: the caller (or another sink of a Tee) may hold the same parts.
func (r *Record) clip() {
	for _, p := range []*string{&r.Source, &r.Session, &r.Agent, &r.Mode, &r.Owner, &r.Reason} {
		*p = cut(*p)
	}
	edit(&r.Start, func(x *Start) { x.Command = cutList(x.Command) })
	edit(&r.Op, func(x *Op) { x.Object, x.Comm, x.Syscall = cut(x.Object), cut(x.Comm), cut(x.Syscall) })
	edit(&r.Violation, func(x *Violation) { x.Error, x.Needed = cut(x.Error), cut(x.Needed) })
	edit(&r.Rollback, func(x *Rollback) { x.Path, x.Error, x.Why = cut(x.Path), cut(x.Error), cut(x.Why) })
	edit(&r.End, func(x *End) { x.LogPath = cut(x.LogPath) })
	edit(&r.Lease, func(x *Lease) { x.Object, x.Holder, x.Leases = cut(x.Object), cut(x.Holder), cutList(x.Leases) })
	edit(&r.Tool, func(x *Tool) {
		x.Name, x.Call, x.Approver, x.Reason = cut(x.Name), cut(x.Call), cut(x.Approver), cut(x.Reason)
	})
}

// edit replaces *p, when set, by a copy that f changed.
func edit[T any](p **T, f func(*T)) {
	if *p == nil {
		return
	}
	x := **p
	f(&x)
	*p = &x
}

// cutList is a copy of l, at most maxList items (and "…") each cut.
func cutList(l []string) []string {
	if l == nil {
		return nil
	}
	n := min(len(l), maxList)
	out := make([]string, n, n+1)
	for i := range n {
		out[i] = cut(l[i])
	}
	if len(l) > maxList {
		out = append(out, "…")
	}
	return out
}

// cut keeps at most maxString bytes of s, on a rune boundary.
func cut(s string) string {
	if len(s) <= maxString {
		return s
	}
	i := maxString
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
