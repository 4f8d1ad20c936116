//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
)

// Client talks to klockd. One connection carries one request; Client dials
// a new one per call after the first.
type Client struct {
	path string
	c    *net.UnixConn // the connection Dial made, until a call uses it
}

// Dial connects to klockd at path (SocketPath() when empty). It fails with
// ErrNoDaemon when nothing listens there (no socket, or a stale one), and
// with ErrForbidden when the socket's permissions keep the caller out.
func Dial(path string) (*Client, error) {
	if path == "" {
		path = SocketPath()
	}
	cl := &Client{path: path}
	c, err := cl.dial()
	if err != nil {
		return nil, err
	}
	cl.c = c
	return cl, nil
}

func (cl *Client) dial() (*net.UnixConn, error) { return wire.Dial(cl.path) }

func (cl *Client) conn() (*net.UnixConn, error) {
	if c := cl.c; c != nil {
		cl.c = nil
		return c, nil
	}
	return cl.dial()
}

// Close releases the unused connection, if any.
func (cl *Client) Close() error {
	if cl.c != nil {
		err := cl.c.Close()
		cl.c = nil
		return err
	}
	return nil
}

// roundTrip sends one request and reads its single reply.
func (cl *Client) roundTrip(m *message) (*message, error) {
	return cl.roundTripWithin(m, requestTimeout)
}

// roundTripWithin is roundTrip waiting up to d for the reply.
func (cl *Client) roundTripWithin(m *message, d time.Duration) (*message, error) {
	c, err := cl.conn()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	m.V = ProtocolVersion
	if err := writeFrame(c, m); err != nil {
		return nil, refusal(c, fmt.Errorf("klockd: send: %w", err))
	}
	r, fs, err := readFrame(c, maxReplyFrame)
	closeAll(fs)
	if err != nil {
		return nil, fmt.Errorf("klockd: no reply: %w", err)
	}
	if r.Type == typeError && r.Error != nil {
		return nil, r.Error
	}
	return r, nil
}

// refusal returns the error klockd sent before it closed the connection
// (it refuses a peer before reading its request, so the request's write may
// fail), typed; else err.
func refusal(c *net.UnixConn, err error) error { return fromWire(wire.Refusal(c, err)) }

// PS lists klockd's running sessions (a non-root caller sees its own).
func (cl *Client) PS() ([]SessionInfo, error) {
	r, err := cl.roundTrip(msg(wire.Message{Type: typePS}))
	if err != nil {
		return nil, err
	}
	if r.Type != typeSessions {
		return nil, fmt.Errorf("%w: reply %q to ps", ErrProtocol, r.Type)
	}
	return r.Sessions, nil
}

// Kill ends a running session (ErrNoSession when klockd runs none by that
// id). The session ends as killed, with rollback and its log; its klock run
// gets the Killed result.
func (cl *Client) Kill(id string) error {
	r, err := cl.roundTrip(msg(wire.Message{Type: typeKill, ID: id}))
	if err != nil {
		return err
	}
	if r.Type != typeKilled {
		return fmt.Errorf("%w: reply %q to kill", ErrProtocol, r.Type)
	}
	return nil
}

// Run is a RunRequest plus what stays on the client's side.
type Run struct {
	RunRequest
	// Stdin, Stdout, Stderr are passed to klockd as descriptors; the agent
	// uses them directly. nil: /dev/null.
	Stdin, Stdout, Stderr *os.File
	// Logger receives the session's progress and warnings as the embedded
	// path would log them (default slog.Default()).
	Logger *slog.Logger
	// Started, when set, is called once klockd has accepted the session.
	Started func(SessionInfo)
}

// Run runs a session in klockd and returns its result, as session.Run
// does: an error with a nil result when the session did not start (an
// *Error whose errors.Is matches the embedded path's sentinels), a result
// and an error only when klock itself failed after the agent ran. When ctx
// is done the session is killed (as the embedded path does on SIGINT) and
// Run still returns its result.
func (cl *Client) Run(ctx context.Context, r *Run) (*session.Result, error) {
	c, err := cl.conn()
	if err != nil {
		return nil, err
	}
	h := wire.RunHandlers{Started: r.Started, Log: wire.LogTo(ctx, r.Logger)}
	w, err := wire.Run(ctx, c, r.RunRequest, [3]*os.File{r.Stdin, r.Stdout, r.Stderr}, h)
	if err != nil {
		return nil, fromWire(err)
	}
	return fromWireResult(w)
}

// RunViaDaemon runs the session described by o in klockd when one listens
// on socket (SocketPath() when empty). used is false, with a nil error,
// when no daemon is there (the caller then runs session.Run itself), and
// when o's stdio are not all *os.File (they cannot be passed to klockd).
// Otherwise the results mean what session.Run's do.
//
// From o it sends Manifest's file (ManifestData, ManifestPath), Mode,
// Command, Env, Dir, User, AllowDegraded, RollbackOnInterrupt, KeepTmp, LogDir,
// LeaseWait, LeaseTTL, LeaseGrace, LeaseGroup and the stdio; Manifest is re-parsed by
// klockd from ManifestData. ID, Snapshot, Resolve, Backends, Leases and
// LeaseTenant are klockd's own. A nil User is launch.DefaultUser of the workdir, as in
// the embedded path.
func RunViaDaemon(ctx context.Context, socket string, o session.Options) (res *session.Result, used bool, err error) {
	var files [3]*os.File
	for i, s := range []any{o.Stdin, o.Stdout, o.Stderr} {
		if s == nil {
			continue
		}
		f, ok := s.(*os.File)
		if !ok {
			return nil, false, nil
		}
		files[i] = f
	}
	cl, err := Dial(socket)
	if errors.Is(err, ErrNoDaemon) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	defer cl.Close()
	if o.Manifest == nil || o.ManifestData == nil {
		return nil, true, fmt.Errorf("%w: RunViaDaemon needs Manifest and ManifestData", ErrBadRequest)
	}
	cred := o.User
	if cred == nil {
		if cred, err = launch.DefaultUser(o.Manifest.Workdir); err != nil {
			return nil, true, err
		}
	}
	abs := func(p string) string {
		if p == "" {
			return ""
		}
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	r := &Run{
		RunRequest: RunRequest{
			Manifest: o.ManifestData, ManifestPath: abs(o.ManifestPath), Mode: string(o.Mode),
			Argv: o.Command, Env: o.Env, Dir: abs(o.Dir),
			UID: cred.UID, GID: cred.GID, Groups: cred.Groups, AllowRoot: cred.AllowRoot,
			AllowDegraded: o.AllowDegraded, Backend: string(o.Backend), Learn: true, LogDir: abs(o.LogDir),
			RollbackOnInterrupt: o.RollbackOnInterrupt, KeepTmp: o.KeepTmp, RecordAll: o.RecordAll,
			LeaseWait: o.LeaseWait, LeaseTTL: o.LeaseTTL, LeaseGrace: o.LeaseGrace, LeaseGroup: o.LeaseGroup,
		},
		Stdin: files[0], Stdout: files[1], Stderr: files[2], Logger: o.Logger,
	}
	res, err = cl.Run(ctx, r)
	return res, true, err
}
