//go:build linux

package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
)

// RunHandlers receive what klockd says of a run before its result.
type RunHandlers struct {
	// Started, when set, is called once klockd has accepted the session.
	Started func(SessionInfo)
	// Log, when set, receives the session's progress and warnings.
	Log func(LogEvent)
}

// Run sends req on c, with stdio (the agent's fds 0, 1, 2; a nil one is
// /dev/null) attached, and reads klockd's replies until the result. It
// returns an *Error when klockd refused or could not start the session.
// When ctx is done it asks klockd to end the session (which kills it, as
// Ctrl-C does in the embedded path) and still returns the result. c is
// closed.
func Run(ctx context.Context, c *net.UnixConn, req RunRequest, stdio [3]*os.File, h RunHandlers) (*Result, error) {
	defer c.Close()
	req.Stdio = nil
	var files []*os.File
	for i, f := range stdio {
		if f != nil {
			req.Stdio = append(req.Stdio, i)
			files = append(files, f)
		}
	}
	if err := WriteFrame(c, &Message{Type: TypeRun, V: ProtocolVersion, Run: &req}, files...); err != nil {
		return nil, Refusal(c, fmt.Errorf("klockd: send run request: %w", err))
	}
	stop := context.AfterFunc(ctx, func() {
		reason := "klock was interrupted"
		if cause := context.Cause(ctx); cause != nil {
			reason = cause.Error()
		}
		_ = WriteFrame(c, &Message{Type: TypeCancel, Reason: reason})
	})
	defer stop()
	return readRun(c, h)
}

// readRun reads a run's replies until its result or error.
func readRun(c *net.UnixConn, h RunHandlers) (*Result, error) {
	started := "" // the session's id, once klockd said it runs
	for {
		var m Message
		fs, err := ReadFrame(c, MaxReplyFrame, &m)
		CloseAll(fs)
		if err != nil {
			return nil, lostRun(err, started)
		}
		switch m.Type {
		case TypeStarted:
			if m.Session != nil {
				started = m.Session.ID
				if h.Started != nil {
					h.Started(*m.Session)
				}
			}
		case TypeLog:
			if m.Log != nil && h.Log != nil {
				h.Log(*m.Log)
			}
		case TypeResult:
			if m.Result == nil {
				return nil, fmt.Errorf("%w: empty result", ErrProtocol)
			}
			return m.Result, nil
		case TypeError:
			if m.Error == nil {
				return nil, fmt.Errorf("%w: empty error", ErrProtocol)
			}
			return nil, m.Error
		default:
			return nil, fmt.Errorf("%w: unexpected %q", ErrProtocol, m.Type)
		}
	}
}

// lostRun is the error of a run whose connection failed before its result.
func lostRun(err error, started string) error {
	eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	switch {
	case eof && started != "":
		// klockd died with the session: its agent died with it
		// (parent-death signal), its log says INCOMPLETE.
		return fmt.Errorf("klockd ended during session %s (%w): nothing was rolled back; klock log %s shows it INCOMPLETE, and klock rollback -m MANIFEST %s restores the pre-flight state", started, err, started, started)
	case eof:
		return fmt.Errorf("klockd closed the connection before the session's result: %w", err)
	}
	return fmt.Errorf("klockd: %w", err)
}

// LogTo is a RunHandlers.Log that logs each event to l as the embedded
// path would have (slog.Default() when l is nil).
func LogTo(ctx context.Context, l *slog.Logger) func(LogEvent) {
	if l == nil {
		l = slog.Default()
	}
	return func(ev LogEvent) {
		args := make([]any, 0, 2*len(ev.Attrs))
		for k, v := range ev.Attrs {
			args = append(args, k, v)
		}
		l.Log(ctx, ev.Level, ev.Message, args...)
	}
}
