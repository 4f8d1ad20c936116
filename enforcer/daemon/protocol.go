//go:build linux

package daemon

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

// ProtocolVersion is the "v" of every request. A server refuses a request of
// another version (class bad_request) rather than guess.
const ProtocolVersion = 1

// Frame size limits: a request carries a manifest, a reply a whole
// verification log.
const (
	maxRequestFrame = 16 << 20
	maxReplyFrame   = 256 << 20
)

// Message types.
const (
	// client -> server
	typeRun    = "run"
	typePS     = "ps"
	typeKill   = "kill"
	typeCancel = "cancel"
	typeAdopt  = "adopt"
	typeEnd    = "end"
	typeEvents = "events"
	// typePublish: one record of a tool gateway's (publish.go); the
	// connection carries one a frame until the gateway goes away.
	typePublish = "publish"
	// server -> client
	typeStarted  = "started"
	typeLog      = "log"
	typeResult   = "result"
	typeSessions = "sessions"
	typeKilled   = "killed"
	typeError    = "error"
	typeEvent    = "event"
	// typeEventsEnd ends a stream that does not follow: the backlog is
	// sent.
	typeEventsEnd = "events_end"
)

// message is every frame's JSON body; Type says which fields are set.
type message struct {
	Type     string           `json:"type"`
	V        int              `json:"v,omitempty"`
	Run      *RunRequest      `json:"run,omitempty"`
	ID       string           `json:"id,omitempty"`
	Reason   string           `json:"reason,omitempty"`
	Session  *SessionInfo     `json:"session,omitempty"`
	Sessions []SessionInfo    `json:"sessions,omitempty"`
	Log      *LogEvent        `json:"log,omitempty"`
	Result   *WireResult      `json:"result,omitempty"`
	Error    *Error           `json:"error,omitempty"`
	Adopt    *AdoptRequest    `json:"adopt,omitempty"`
	End      *EndRequest      `json:"end,omitempty"`
	Events   *EventsRequest   `json:"events,omitempty"`
	Event    *eventlog.Record `json:"event,omitempty"`
}

// RunRequest is what a client asks klockd to run: everything
// session.Options holds that can cross a socket. The agent's stdio does not
// travel in the JSON: the client's own file descriptors ride on the request
// frame as SCM_RIGHTS, in the order Stdio names them, so the agent writes
// straight to the user's terminal exactly as in the embedded path.
type RunRequest struct {
	Manifest     []byte      `json:"manifest"`      // the manifest file's bytes
	ManifestPath string      `json:"manifest_path"` // its path, for messages and the log
	Mode         policy.Mode `json:"mode,omitempty"`
	Argv         []string    `json:"argv"`
	Env          []string    `json:"env"`
	Dir          string      `json:"dir,omitempty"`
	// UID, GID, Groups: who the agent runs as (required; a non-root peer
	// may only name itself). AllowRoot must be set for uid 0.
	UID           uint32   `json:"uid"`
	GID           uint32   `json:"gid"`
	Groups        []uint32 `json:"groups,omitempty"`
	AllowRoot     bool     `json:"allow_root,omitempty"`
	AllowDegraded bool     `json:"allow_degraded,omitempty"`
	Backend       string   `json:"backend,omitempty"` // auto (default), bpf-lsm, landlock, observe
	// RollbackOnInterrupt is session.Options.RollbackOnInterrupt.
	RollbackOnInterrupt bool `json:"rollback_on_interrupt,omitempty"`
	// KeepTmp is session.Options.KeepTmp (klock run --keep-tmp).
	KeepTmp bool `json:"keep_tmp,omitempty"`
	// Learn asks for the learned manifest in the result (permissive mode).
	Learn  bool   `json:"learn,omitempty"`
	LogDir string `json:"log_dir,omitempty"`
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
	ID      string      `json:"id"`
	Agent   string      `json:"agent"`
	PID     int         `json:"pid"` // the agent's pid in klockd's pid namespace; 0 while starting
	Mode    policy.Mode `json:"mode"`
	Start   time.Time   `json:"start"`
	State   string      `json:"state"` // StateStarting, StateRunning or StateKilling
	UID     uint32      `json:"uid"`   // the client that created it
	Command []string    `json:"command"`
	// Container is the container id of a container's session (adopt).
	Container string `json:"container,omitempty"`
	// Network is what the agent sent and received so far through its
	// packet wall and loopback relays (a session with NET intents in a
	// network namespace of its own; nil otherwise).
	Network *Traffic `json:"network,omitempty"`
	// LeaseStall is set while the fleet's lease store does not answer the
	// session's heartbeats: since when, and whether the agent is frozen.
	LeaseStall *LeaseStall `json:"lease_stall,omitempty"`
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

// WireResult is session.Result on the wire.
type WireResult struct {
	ID            string          `json:"id"`
	ExitCode      int             `json:"exit_code"`
	Signal        int             `json:"signal,omitempty"`
	Killed        bool            `json:"killed"`
	Interrupted   bool            `json:"interrupted,omitempty"`
	Reason        string          `json:"reason,omitempty"`
	Violation     *WireViolation  `json:"violation,omitempty"`
	ViolationText string          `json:"violation_text,omitempty"`
	LogPath       string          `json:"log_path,omitempty"`
	Log           json.RawMessage `json:"log,omitempty"`
	Learned       []byte          `json:"learned,omitempty"`
	// Error is a failure of klock itself after the agent ran (e.g. the
	// verification log could not be written).
	Error string `json:"error,omitempty"`
}

// WireViolation carries a *policy.ScopeViolationError.
type WireViolation struct {
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

func toWire(r *session.Result, learn bool) *WireResult {
	w := &WireResult{ID: r.ID, ExitCode: r.Exit.Code, Signal: int(r.Exit.Signal), Killed: r.Killed, Interrupted: r.Interrupted, Reason: r.Reason, LogPath: r.LogPath}
	if r.Violation != nil {
		w.ViolationText = r.Violation.Error()
		var sv *policy.ScopeViolationError
		if errors.As(r.Violation, &sv) {
			t := sv.Triple
			w.Violation = &WireViolation{Predicate: uint8(t.Predicate), Type: uint8(t.Type), Path: t.Path, Host: t.Host,
				Proto: uint8(t.Proto), Raw: t.Raw, Declared: uint8(sv.Declared), Via: sv.Via}
			if t.Addr.IsValid() {
				w.Violation.Addr = t.Addr.String()
			}
		}
	}
	if r.Log != nil {
		if b, err := json.Marshal(r.Log); err == nil {
			w.Log = b
		}
	}
	if learn {
		w.Learned = r.Learned
	}
	return w
}

func (w *WireResult) result() (*session.Result, error) {
	r := &session.Result{ID: w.ID, Exit: launch.Exit{Code: w.ExitCode, Signal: syscall.Signal(w.Signal)},
		Killed: w.Killed, Interrupted: w.Interrupted, Reason: w.Reason, LogPath: w.LogPath, Learned: w.Learned}
	switch {
	case w.Violation != nil:
		v := w.Violation
		sv := &policy.ScopeViolationError{Declared: policy.Access(v.Declared), Via: v.Via, Triple: policy.Triple{
			Predicate: policy.Predicate(v.Predicate), Type: policy.ObjectType(v.Type), Path: v.Path,
			Host: v.Host, Proto: policy.Proto(v.Proto), Raw: v.Raw}}
		if v.Addr != "" {
			sv.Triple.Addr, _ = netip.ParseAddrPort(v.Addr)
		}
		r.Violation = sv
	case w.ViolationText != "":
		r.Violation = errors.New(w.ViolationText)
	}
	if len(w.Log) > 0 {
		l := &vlog.Log{}
		if err := json.Unmarshal(w.Log, l); err == nil {
			r.Log = l
		}
	}
	if w.Error != "" {
		return r, &Error{Class: ClassInternal, Message: w.Error}
	}
	return r, nil
}

// writeFrame sends one frame: a 4-byte big-endian length, then the JSON
// body. files, when any, ride on the frame's first byte as SCM_RIGHTS.
func writeFrame(c *net.UnixConn, m *message, files ...*os.File) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		n, oobn, err := c.WriteMsgUnix(buf, unix.UnixRights(fds...), nil)
		if err != nil {
			return err
		}
		if oobn == 0 {
			return errors.New("daemon: file descriptors were not sent")
		}
		buf = buf[n:]
		if len(buf) == 0 {
			return nil
		}
	}
	_, err = c.Write(buf)
	return err
}

// readFrame reads one frame and any descriptors that came with it (closed
// by the caller). Descriptors are received close-on-exec.
func readFrame(c *net.UnixConn, limit int) (*message, []*os.File, error) {
	var files []*os.File
	fail := func(err error) (*message, []*os.File, error) {
		closeAll(files)
		return nil, nil, err
	}
	readFull := func(b []byte) error {
		oob := make([]byte, unix.CmsgSpace(4*8))
		for len(b) > 0 {
			n, oobn, _, _, err := c.ReadMsgUnix(b, oob)
			n, oobn = max(n, 0), max(oobn, 0)
			if oobn > 0 {
				files = append(files, parseRights(oob[:oobn])...)
			}
			b = b[n:]
			if err != nil {
				if err == io.EOF && len(b) > 0 && n == 0 {
					return io.EOF
				}
				return err
			}
			if n == 0 && len(b) > 0 {
				return io.ErrUnexpectedEOF
			}
		}
		return nil
	}
	var hdr [4]byte
	if err := readFull(hdr[:]); err != nil {
		return fail(err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if int64(n) > int64(limit) {
		return fail(fmt.Errorf("%w: frame of %d bytes exceeds %d", ErrProtocol, n, limit))
	}
	body := make([]byte, n)
	if err := readFull(body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fail(err)
	}
	m := &message{}
	if err := json.Unmarshal(body, m); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrProtocol, err))
	}
	return m, files, nil
}

func parseRights(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("client-fd-%d", fd)))
		}
	}
	return files
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
