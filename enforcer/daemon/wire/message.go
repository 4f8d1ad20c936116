package wire

import (
	"encoding/json"
	"log/slog"
	"time"
)

// ProtocolVersion is the "v" of every request. A server refuses a request of
// another version (class bad_request) rather than guess.
const ProtocolVersion = 1

// Message types.
const (
	// client -> server
	TypeRun    = "run"
	TypePS     = "ps"
	TypeKill   = "kill"
	TypeCancel = "cancel"
	TypeAdopt  = "adopt"
	TypeEnd    = "end"
	TypeEvents = "events"
	// TypePublish: one record of a tool gateway's; the connection carries
	// one a frame until the gateway goes away.
	TypePublish = "publish"
	// server -> client
	TypeStarted  = "started"
	TypeLog      = "log"
	TypeResult   = "result"
	TypeSessions = "sessions"
	TypeKilled   = "killed"
	TypeError    = "error"
	TypeEvent    = "event"
	// TypeEventsEnd ends a stream that does not follow: the backlog is
	// sent.
	TypeEventsEnd = "events_end"
)

// Message is the part of every frame's JSON body a light client reads and
// writes (a run, a container's adopt and end); Type says which fields are
// set. enforcer/daemon extends it with the requests only the server and
// the full client know (events), in the same JSON object.
type Message struct {
	Type     string        `json:"type"`
	V        int           `json:"v,omitempty"`
	Run      *RunRequest   `json:"run,omitempty"`
	ID       string        `json:"id,omitempty"`
	Reason   string        `json:"reason,omitempty"`
	Session  *SessionInfo  `json:"session,omitempty"`
	Sessions []SessionInfo `json:"sessions,omitempty"`
	Log      *LogEvent     `json:"log,omitempty"`
	Result   *Result       `json:"result,omitempty"`
	Error    *Error        `json:"error,omitempty"`
	Adopt    *AdoptRequest `json:"adopt,omitempty"`
	End      *EndRequest   `json:"end,omitempty"`
}

// RunRequest is what a client asks klockd to run: everything
// session.Options holds that can cross a socket. The agent's stdio does not
// travel in the JSON: the client's own file descriptors ride on the request
// frame as SCM_RIGHTS, in the order Stdio names them, so the agent writes
// straight to the user's terminal exactly as in the embedded path.
type RunRequest struct {
	Manifest     []byte   `json:"manifest"`      // the manifest file's bytes
	ManifestPath string   `json:"manifest_path"` // its path, for messages and the log
	Mode         string   `json:"mode,omitempty"`
	Argv         []string `json:"argv"`
	Env          []string `json:"env"`
	Dir          string   `json:"dir,omitempty"`
	// UID, GID, Groups: who the agent runs as (a non-root peer may only
	// name itself). AllowRoot must be set for uid 0.
	UID       uint32   `json:"uid"`
	GID       uint32   `json:"gid"`
	Groups    []uint32 `json:"groups,omitempty"`
	AllowRoot bool     `json:"allow_root,omitempty"`
	// DefaultUser asks klockd to choose the user as the embedded path
	// does (launch.DefaultUser): the workdir's owner, else the client's
	// SUDO_UID and SUDO_GID, given here. UID, GID and Groups are then
	// ignored. A client that has not parsed the manifest (the klock run
	// front) does not know the workdir.
	DefaultUser bool   `json:"default_user,omitempty"`
	SudoUID     string `json:"sudo_uid,omitempty"`
	SudoGID     string `json:"sudo_gid,omitempty"`

	AllowDegraded bool   `json:"allow_degraded,omitempty"`
	Backend       string `json:"backend,omitempty"` // auto (default), bpf-lsm, landlock, observe
	// RollbackOnInterrupt is session.Options.RollbackOnInterrupt.
	RollbackOnInterrupt bool `json:"rollback_on_interrupt,omitempty"`
	// KeepTmp is session.Options.KeepTmp (klock run --keep-tmp).
	KeepTmp bool `json:"keep_tmp,omitempty"`
	// Learn asks for the learned manifest in the result (permissive mode).
	Learn bool `json:"learn,omitempty"`
	// RecordAll is session.Options.RecordAll (klock run --record all).
	RecordAll bool `json:"record_all,omitempty"`
	// Summary asks for the verification log's human summary in the result
	// (Result.Summary), rendered by klockd for a client that does not link
	// the renderer.
	Summary bool   `json:"summary,omitempty"`
	LogDir  string `json:"log_dir,omitempty"`
	// LeaseWait is session.Options.LeaseWait (klock run --wait), LeaseTTL
	// and LeaseGrace its LeaseTTL and LeaseGrace; nanoseconds, zero for
	// the defaults.
	LeaseWait  time.Duration `json:"lease_wait,omitempty"`
	LeaseTTL   time.Duration `json:"lease_ttl,omitempty"`
	LeaseGrace time.Duration `json:"lease_grace,omitempty"`
	// LeaseGroup is session.Options.LeaseGroup; it joins holders of the
	// client's own tenant only.
	LeaseGroup string `json:"lease_group,omitempty"`
	// Stdio lists which of the agent's fds 0, 1, 2 the attached
	// descriptors become, in order (e.g. [0,1,2]); an absent one is
	// /dev/null.
	Stdio []int `json:"stdio,omitempty"`
}

// SessionInfo is one running session, as klock ps shows it.
type SessionInfo struct {
	ID      string    `json:"id"`
	Agent   string    `json:"agent"`
	PID     int       `json:"pid"` // the agent's pid in klockd's pid namespace; 0 while starting
	Mode    string    `json:"mode"`
	Start   time.Time `json:"start"`
	State   string    `json:"state"` // StateStarting, StateRunning or StateKilling
	UID     uint32    `json:"uid"`   // the client that created it
	Command []string  `json:"command"`
	// Container is the container id of a container's session (adopt).
	Container string `json:"container,omitempty"`
	// Network is what the agent sent and received so far through its
	// packet wall and loopback relays (a session with NET intents in a
	// network namespace of its own; nil otherwise).
	Network *Traffic `json:"network,omitempty"`
	// LeaseStall is set while the fleet's lease store does not answer the
	// session's heartbeats: since when, and whether the agent is frozen.
	LeaseStall *LeaseStall `json:"lease_stall,omitempty"`
	// NotEnforcing names each wall that let its canary through before a
	// permissive agent started (a strict one never starts so): the agent
	// runs without it.
	NotEnforcing []string `json:"not_enforcing,omitempty"`
}

// LeaseStall is SessionInfo.LeaseStall.
type LeaseStall struct {
	Since  time.Time `json:"since"`
	Frozen bool      `json:"frozen"`
	Why    string    `json:"why"`
}

// Traffic is a running session's bytes out and in.
type Traffic struct {
	OutBytes uint64 `json:"out_bytes"`
	InBytes  uint64 `json:"in_bytes"`
}

// Session states.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StateKilling  = "killing"
)

// LogEvent is one progress or warning record of a running session
// (what the embedded path logs through slog), forwarded to the client.
type LogEvent struct {
	Time    time.Time         `json:"time"`
	Level   slog.Level        `json:"level"`
	Message string            `json:"msg"`
	Attrs   map[string]string `json:"attrs,omitempty"`
}

// Result is session.Result on the wire.
type Result struct {
	ID       string `json:"id"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	// ExitText is the agent's exit in words ("exit status 1",
	// "killed by SIGKILL").
	ExitText      string          `json:"exit_text,omitempty"`
	Killed        bool            `json:"killed"`
	Interrupted   bool            `json:"interrupted,omitempty"`
	Reason        string          `json:"reason,omitempty"`
	Violation     *Violation      `json:"violation,omitempty"`
	ViolationText string          `json:"violation_text,omitempty"`
	LogPath       string          `json:"log_path,omitempty"`
	Log           json.RawMessage `json:"log,omitempty"`
	Learned       []byte          `json:"learned,omitempty"`
	// Summary is the log's human summary (RunRequest.Summary), and
	// Refused the declared operations the wall refused, first first:
	// what klock run prints and decides its exit by.
	Summary string      `json:"summary,omitempty"`
	Refused []RefusedOp `json:"refused,omitempty"`
	// Error is a failure of klock itself after the agent ran (e.g. the
	// verification log could not be written).
	Error string `json:"error,omitempty"`
}

// RefusedOp is one declared operation the wall refused: its triple and the
// intent that declares it.
type RefusedOp struct {
	Triple    string `json:"triple"`
	AllowedBy string `json:"allowed_by"`
}

// Violation carries a *policy.ScopeViolationError.
type Violation struct {
	Predicate uint8  `json:"predicate"`
	Type      uint8  `json:"type"`
	Path      string `json:"path,omitempty"`
	Addr      string `json:"addr,omitempty"`
	Host      string `json:"host,omitempty"`
	Proto     uint8  `json:"proto,omitempty"`
	Raw       bool   `json:"raw,omitempty"`
	Declared  uint8  `json:"declared"`
	Via       string `json:"via,omitempty"`
}
