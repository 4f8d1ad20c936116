//go:build linux

package daemon

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// The protocol is enforcer/daemon/wire's; these names are the server's
// and the full client's view of it.
const (
	ProtocolVersion = wire.ProtocolVersion
	maxRequestFrame = wire.MaxRequestFrame
	maxReplyFrame   = wire.MaxReplyFrame

	typeRun       = wire.TypeRun
	typePS        = wire.TypePS
	typeKill      = wire.TypeKill
	typeCancel    = wire.TypeCancel
	typeAdopt     = wire.TypeAdopt
	typeEnd       = wire.TypeEnd
	typeEvents    = wire.TypeEvents
	typePublish   = wire.TypePublish
	typeStarted   = wire.TypeStarted
	typeLog       = wire.TypeLog
	typeResult    = wire.TypeResult
	typeSessions  = wire.TypeSessions
	typeKilled    = wire.TypeKilled
	typeError     = wire.TypeError
	typeEvent     = wire.TypeEvent
	typeEventsEnd = wire.TypeEventsEnd

	StateStarting = wire.StateStarting
	StateRunning  = wire.StateRunning
	StateKilling  = wire.StateKilling
)

// The messages a run's client shares with the server (enforcer/daemon/wire).
type (
	RunRequest  = wire.RunRequest
	SessionInfo = wire.SessionInfo
	LeaseStall  = wire.LeaseStall
	Traffic     = wire.Traffic
	LogEvent    = wire.LogEvent
	WireResult  = wire.Result
)

// message is every frame's JSON body: the run client's part
// (wire.Message) and the requests only the server and the full client
// know, in one JSON object. Error shadows wire.Message's with the typed
// lease conflict.
type message struct {
	wire.Message
	Error  *Error           `json:"error,omitempty"`
	Events *EventsRequest   `json:"events,omitempty"`
	Event  *eventlog.Record `json:"event,omitempty"`
}

// msg is a message of the wire's fields alone.
func msg(m wire.Message) *message { return &message{Message: m} }

// errorMessage is the reply that refuses with err.
func errorMessage(err error) *message {
	return &message{Message: wire.Message{Type: typeError}, Error: wireError(err)}
}

func toWire(r *session.Result, learn bool) *WireResult {
	w := &WireResult{ID: r.ID, ExitCode: r.Exit.Code, Signal: int(r.Exit.Signal), ExitText: r.Exit.String(), Killed: r.Killed, Interrupted: r.Interrupted, Reason: r.Reason, LogPath: r.LogPath}
	if r.Violation != nil {
		w.ViolationText = r.Violation.Error()
		var sv *policy.ScopeViolationError
		if errors.As(r.Violation, &sv) {
			t := sv.Triple
			w.Violation = &wire.Violation{Predicate: uint8(t.Predicate), Type: uint8(t.Type), Path: t.Path, Host: t.Host,
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
		for _, f := range r.Log.Refused {
			w.Refused = append(w.Refused, wire.RefusedOp{Triple: f.Triple, AllowedBy: f.AllowedBy})
		}
	}
	if learn {
		w.Learned = r.Learned
	}
	return w
}

// withSummary adds the log's human summary to w, as klock run renders it,
// for a client that does not link the renderer (RunRequest.Summary).
func withSummary(w *WireResult, r *session.Result) {
	if r.Log == nil {
		return
	}
	var b strings.Builder
	if err := vlog.Render(&b, r.Log, vlog.RenderOptions{}); err == nil {
		w.Summary = b.String()
	}
}

func fromWireResult(w *WireResult) (*session.Result, error) {
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

// writeFrame sends one frame (wire.WriteFrame).
func writeFrame(c *net.UnixConn, m *message, files ...*os.File) error {
	return wire.WriteFrame(c, m, files...)
}

// readFrame reads one frame and any descriptors that came with it (closed
// by the caller; wire.ReadFrame).
func readFrame(c *net.UnixConn, limit int) (*message, []*os.File, error) {
	m := &message{}
	files, err := wire.ReadFrame(c, limit, m)
	if err != nil {
		return nil, nil, err
	}
	return m, files, nil
}

func closeAll(files []*os.File) { wire.CloseAll(files) }
