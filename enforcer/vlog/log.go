package vlog

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// Schema is the version tag of the verification log format.
const Schema = "klock.verification/v1"

// FileName is the log's file name inside the session directory.
const FileName = "verification.json"

// What a backend guaranteed.
const (
	GuaranteeBlocks  = "blocks before the effect"
	GuaranteeDetects = "detects, kills and rolls back"
	// GuaranteeRecords: the mechanism blocks nothing and kills nothing; it
	// records (a permissive session's --backend observe).
	GuaranteeRecords = "records only: blocks nothing"
)

// Headline verdicts.
const (
	VerdictClean     = "CLEAN"
	VerdictViolation = "VIOLATION"
	VerdictAmended   = "AMENDED"
	// VerdictRefused: no violation, but a wall of klock's refused an
	// operation the manifest declares (klock's failure, not the agent's):
	// not CLEAN, since the agent did not get what it was promised.
	VerdictRefused = "REFUSED"
	// VerdictKilled: klock ended the session without a scope violation
	// (strict mode lost kernel events and failed closed).
	VerdictKilled = "KILLED"
	// VerdictIncomplete: a log with no end, written when the session
	// started (Begin): the session is still running, or klock was stopped
	// (kill -9, a crash, the machine went down) before it wrote the real
	// one. What the agent did is not in it.
	VerdictIncomplete = "INCOMPLETE"
)

// Network is what a session's network wall counted.
type Network struct {
	// Peers: one entry per declared peer (its intent's pattern), then
	// "(dropped)" (what the wall dropped: out is from the session, in is
	// to it) and "(established)" (flows a peer accepted that went on
	// after the peer's DNS answer expired).
	Peers []PeerCounters `json:"peers"`
	// OutBytes and InBytes are the totals the session sent and received
	// through the wall and the relays: what was delivered (dropped
	// packets, and what the budget held, not included).
	OutBytes uint64 `json:"out_bytes"`
	InBytes  uint64 `json:"in_bytes"`
	// AttemptedOutBytes is what the agent sent to its peers, delivered or
	// held past the budget (OutBytes plus the peers' OverBudgetBytes).
	AttemptedOutBytes uint64 `json:"attempted_out_bytes,omitempty"`
	// MaxEgressBytes is the manifest's budget (0: none); Exceeded, whether
	// the session spent it (the attempted bytes reached it: a strict
	// session is killed, however soon it exited).
	MaxEgressBytes uint64 `json:"max_egress_bytes,omitempty"`
	Exceeded       bool   `json:"exceeded,omitempty"`
}

// PeerCounters are one declared peer's packets and bytes.
type PeerCounters struct {
	Peer string `json:"peer"`
	// Via is "packet wall" (nftables counters) or "loopback relay" (a
	// host loopback service, relayed into the session's namespace).
	Via string `json:"via"`
	// Out* is what reached the peer: through the wall, IP packets
	// (headers included); through the relay, the bytes it forwarded.
	OutPackets uint64 `json:"out_packets"`
	OutBytes   uint64 `json:"out_bytes"`
	InPackets  uint64 `json:"in_packets"`
	InBytes    uint64 `json:"in_bytes"`
	// OverBudget* is what the agent sent to the peer past the egress
	// budget, which the wall dropped or the relay held: attempted, never
	// delivered.
	OverBudgetPackets uint64 `json:"over_budget_packets,omitempty"`
	OverBudgetBytes   uint64 `json:"over_budget_bytes,omitempty"`
}

// Log is one session's verification log.
type Log struct {
	Schema   string      `json:"schema"`
	Session  string      `json:"session"`
	Agent    string      `json:"agent"`
	Manifest ManifestRef `json:"manifest"`
	Mode     policy.Mode `json:"mode"`
	Start    time.Time   `json:"start"`
	// End is zero in the log written when the session started (Begin).
	End time.Time `json:"end"`
	// KlockPID is the klock process that ran the session (klock run, or
	// klockd), so an incomplete log says whose end is missing.
	KlockPID int `json:"klock_pid,omitempty"`
	// Verdict and Summary are the headline, filled by Finish and Write.
	Verdict  string    `json:"verdict"`
	Summary  string    `json:"summary"`
	Backends []Backend `json:"backends"`
	// Canaries: what the walls did with the operations tried before the
	// agent's exec, each of which they must refuse.
	Canaries []Canary `json:"canaries,omitempty"`
	// Leases are the KLIS leases the session held (none in a log of a
	// klock that took no leases); LeaseWait, when it had to wait for them.
	Leases    []HeldLease `json:"leases,omitempty"`
	LeaseWait *LeaseWait  `json:"lease_wait,omitempty"`
	// LeaseStalls are the times the leases could not be renewed (a
	// fleet's store unreachable), in order.
	LeaseStalls []LeaseStall `json:"lease_stalls,omitempty"`
	// Container is set for a container's session (klock-runtime, klock
	// oci-hook): its paths in Intents and Observed are as the container saw
	// them; the rollback's are the host's, mapped through Mounts.
	Container *Container `json:"container,omitempty"`
	// Network is the session's traffic through its packet wall and
	// loopback relays (a session with NET intents in a network namespace
	// of its own); nil otherwise.
	Network *Network `json:"network,omitempty"`
	// Intents are the manifest's declared intents then the leases, with use
	// counts; Baseline holds the baseline's intents, grouped apart.
	Intents  []IntentUse `json:"intents"`
	Baseline []IntentUse `json:"baseline,omitempty"`
	// Unused are declared manifest intents that allowed nothing:
	// under-utilization, not a violation, useful metadata.
	Unused   []string   `json:"under_utilization"`
	Observed []Observed `json:"observed"`
	// Recording says how allowed operations were recorded: RecordCounted
	// (reads below the workdir, when one intent allows them all, are
	// counted in the kernel, Counted) or RecordAll (every operation on
	// its own, as Observed lists them); empty in the logs of other
	// backends.
	Recording string `json:"recording,omitempty"`
	// Counted are the reads counted below a directory (RecordCounted);
	// the read that started each count is in Observed.
	Counted    []Counted   `json:"counted,omitempty"`
	Violations []Violation `json:"violations"`
	Amendments []Amendment `json:"amendments,omitempty"`
	// Refused are declared operations a wall of klock's refused.
	Refused  []Refused    `json:"refused,omitempty"`
	Created  []string     `json:"created,omitempty"`
	Rollback []RollbackOp `json:"rollback"`
	// Intrusions are other sessions' changes to files this session held
	// a lease on, each with what the other session's rollback put back.
	Intrusions []Intrusion `json:"intrusions,omitempty"`
	Lost       Lost        `json:"lost"`
	Events     uint64      `json:"events"`
	Exit       Exit        `json:"exit"`
}

// Intrusion is another session's change to a file this session held a
// lease on (KLIS leases hold inodes: a hard link, rename or write that
// reached the file by another name is one), as that session's rollback
// reported it.
type Intrusion struct {
	Time    time.Time `json:"time"`
	Session string    `json:"session"` // the session whose agent changed it
	Agent   string    `json:"agent"`
	Path    string    `json:"path"`
	// What is that session's violation on the file.
	What string `json:"what,omitempty"`
	// PutBack is what its rollback did to the file ("restored", "moved
	// back", ...); OK false when that failed (Error says why).
	PutBack string `json:"put_back"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
}

// ManifestRef names the manifest the session ran under.
type ManifestRef struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// Backend is one kernel mechanism the session used.
type Backend struct {
	Name      string `json:"name"`
	Guarantee string `json:"guarantee"` // GuaranteeBlocks, GuaranteeDetects or GuaranteeRecords
	// Details are free-form facts, e.g. "Landlock ABI 4", "nearest scope for /srv/repo/*.go".
	Details []string `json:"details,omitempty"`
}

// IntentUse is a declared intent and how many operations it allowed.
type IntentUse struct {
	Intent string `json:"intent"`
	Origin string `json:"origin"`
	Uses   uint64 `json:"uses"`
}

// How a log's allowed operations were recorded (Log.Recording).
const (
	// RecordCounted: the reads of files below the workdir, when one
	// intent allows them all, were counted in the kernel once one was
	// judged, and are listed by directory (Log.Counted); every other
	// operation, violations included, is in Observed on its own.
	RecordCounted = "counted"
	// RecordAll: every operation on its own (klock run --record all).
	RecordAll = "all"
)

// Counted is the reads of files below Dir counted in the kernel
// (RecordCounted): Count of them, allowed by AllowedBy, since First.
type Counted struct {
	Dir       string    `json:"dir"`
	Predicate string    `json:"predicate"`
	Count     uint64    `json:"count"`
	AllowedBy string    `json:"allowed_by"`
	First     time.Time `json:"first"`
	PID       uint32    `json:"pid"`
	Comm      string    `json:"comm"`
}

// Observed is one distinct observed triple.
type Observed struct {
	Triple  string    `json:"triple"`
	Count   uint64    `json:"count"`
	Blocked uint64    `json:"blocked,omitempty"`
	Failed  uint64    `json:"failed,omitempty"`
	First   time.Time `json:"first"`
	PID     uint32    `json:"pid"`
	Comm    string    `json:"comm"`
	Syscall string    `json:"syscall,omitempty"`
	Source  string    `json:"source,omitempty"`
	// AllowedBy is the intent that allowed it, "created by the session",
	// or empty for a violation that was never amended.
	AllowedBy string `json:"allowed_by,omitempty"`
	// Baseline: AllowedBy is one of the baseline's intents (the system
	// files every program reads), not one the manifest declares.
	Baseline  bool `json:"baseline,omitempty"`
	Violation bool `json:"violation,omitempty"`
	// Referred: every occurrence was the judgement of a right an operation
	// on another name needed (a hard link or rename giving this file a new
	// name; a write through a file with names klock's backup did not find,
	// judged on their file system), which changed nothing here by itself
	// (what was done is logged under the other name).
	Referred bool `json:"referred,omitempty"`
}

// Violation is one operation outside the declared scope.
type Violation struct {
	Time   time.Time `json:"time"`
	Triple string    `json:"triple"`
	// Path is the kernel-resolved path (FILE, PROC) or the address (NET).
	Path string `json:"path"`
	// Via is the other name the file was reached through: a hard link or
	// rename that would give its inode rights none of its names had.
	Via      string `json:"via,omitempty"`
	Error    string `json:"error"`    // the ScopeViolationError text
	Needed   string `json:"needed"`   // the intent that would have allowed it
	Declared string `json:"declared"` // what the scope declares on the object
	Blocked  bool   `json:"blocked"`
	// Errno is the kernel's answer when the operation failed (0: it
	// took effect). Blocked is a refusal by a wall (EACCES, EPERM);
	// another errno (EXDEV, ENOENT, ...) is an attempt that failed
	// without effect (see Failed).
	Errno  int32  `json:"errno,omitempty"`
	Action string `json:"action"` // violation-kill | violation-blocked | amended | violation-lease-denied
	Lease  string `json:"lease,omitempty"`
	// LeaseError says why the permissive amendment was not made: no exact
	// intent expresses the triple, or (violation-lease-denied) another
	// session's lease conflicts; LeaseConflicts are those leases.
	LeaseError     string          `json:"lease_error,omitempty"`
	LeaseConflicts []LeaseConflict `json:"lease_conflicts,omitempty"`
	PID            uint32          `json:"pid"`
	Comm           string          `json:"comm"`
	Syscall        string          `json:"syscall,omitempty"`
	Source         string          `json:"source,omitempty"`
}

// ByDNSProxy reports whether the session's DNS proxy refused v, not the
// kernel: no process made a call (PID 0), Syscall says what was asked.
func (v Violation) ByDNSProxy() bool {
	return v.Blocked && v.Source == string(event.SourceDNSProxy)
}

// LeaseConflict is another holder's lease a permissive amendment
// conflicted with.
type LeaseConflict struct {
	ID      string `json:"id"`
	Session string `json:"session"` // its holder's session
	Agent   string `json:"agent"`   // its holder's agent
	Lease   string `json:"lease"`   // what it holds: "MUTATES FILE:/srv/repo/src/**"
}

// LeaseDenied reports whether the violation's amendment was refused by
// another holder's lease.
func (v *Violation) LeaseDenied() bool { return v.Action == ActionLeaseDenied }

// ActionLeaseDenied is a violation's action when its permissive amendment
// conflicted with another session's lease (decide.ActionLeaseDenied).
const ActionLeaseDenied = "violation-lease-denied"

// Refused is one declared operation (or one on a file the session made)
// that a wall of klock's refused.
type Refused struct {
	Time      time.Time `json:"time"`
	Triple    string    `json:"triple"`
	AllowedBy string    `json:"allowed_by"`
	Count     uint64    `json:"count"`
	PID       uint32    `json:"pid"`
	Comm      string    `json:"comm"`
	Syscall   string    `json:"syscall,omitempty"`
	Source    string    `json:"source,omitempty"`
	Errno     int32     `json:"errno,omitempty"`
}

// Amendment is one Dynamic Lease Acquisition (permissive mode).
type Amendment struct {
	Time    time.Time `json:"time"`
	Intent  string    `json:"intent"`
	Triple  string    `json:"triple"`
	PID     uint32    `json:"pid"`
	Comm    string    `json:"comm"`
	Blocked bool      `json:"blocked,omitempty"`
}

// Rollback actions.
const (
	RollbackRestored  = "restored"
	RollbackRemoved   = "removed"
	RollbackRecreated = "recreated"
	// RollbackSpared: made during the session by another user than the
	// agent's, so not the agent's: left in place.
	RollbackSpared = "spared"
)

// RollbackLeft: in the scope of another session's lease (it changed it
// while this one ran, or may): left as it is, Why says whose.
const RollbackLeft = "left"

// RollbackOp is one action of the pre-flight rollback.
type RollbackOp struct {
	Path string `json:"path"`
	// ContainerPath is Path as the container saw it (container sessions).
	ContainerPath string `json:"container_path,omitempty"`
	Action        string `json:"action"` // restored | removed | recreated | spared | left
	OK            bool   `json:"ok"`
	Error         string `json:"error,omitempty"`
	// Why, for left: whose lease covers the path.
	Why string `json:"why,omitempty"`
	// Reclaimed: another session's file (Why says whose) that this
	// session's agent changed, put back all the same, and that session
	// told (its log's Intrusions).
	Reclaimed bool `json:"reclaimed,omitempty"`
}

// Lost summarizes events the kernel could not deliver.
type Lost struct {
	Total   uint64       `json:"total"`
	Reports []LostReport `json:"reports,omitempty"`
}

// LostReport is one report of lost events.
type LostReport struct {
	Time   time.Time `json:"time"`
	Count  uint64    `json:"count"`
	Action string    `json:"action"`
}

// Exit is how the agent ended.
type Exit struct {
	Code          *int   `json:"code,omitempty"`   // exit code when it exited
	Signal        string `json:"signal,omitempty"` // e.g. SIGKILL when signalled
	KilledByKlock bool   `json:"killed_by_klock"`
	Reason        string `json:"reason,omitempty"` // why klock killed it
	// KilledAt is when klock wrote cgroup.kill: set beside the first
	// violation's time, it says how long the agent ran on after it (the
	// detection latency of what no wall blocked).
	KilledAt time.Time `json:"killed_at,omitzero"`
}

// Failed reports whether the violation was an attempt the kernel failed
// for another reason than a wall's refusal (EXDEV, ENOENT, ...): nothing
// took effect, so it was neither blocked nor detected after the effect.
// A non-blocking connect under way (EINPROGRESS) has taken effect.
func (v Violation) Failed() bool {
	return !v.Blocked && v.Errno != 0 && v.Errno != int32(syscall.EINPROGRESS)
}

// ErrnoName is the errno's symbolic name (EXDEV), as the log prints it.
func ErrnoName(e int32) string {
	if n := unix.ErrnoName(syscall.Errno(e)); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", e)
}

// Container names the container a session walled.
type Container struct {
	ID string `json:"id"`
	// Mode is "runtime" (klock-runtime: Landlock inside, hooks) or
	// "hook" (OCI hooks only: no wall inside the container).
	Mode   string `json:"mode"`
	Bundle string `json:"bundle,omitempty"`
	// Mounts map the container's paths to the host's: each Container path
	// (and what is below it) is the Host path.
	Mounts []Mount `json:"mounts,omitempty"`
}

// Mount is one container path and the host path it shows.
type Mount struct {
	Container string `json:"container"`
	Host      string `json:"host"`
}
