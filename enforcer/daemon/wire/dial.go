//go:build linux

package wire

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

const (
	// DefaultSocket is klockd's socket; SocketEnv overrides it for
	// clients (SocketPath).
	DefaultSocket = "/run/klock/klockd.sock"
	SocketEnv     = "KLOCK_SOCKET"
	// DefaultGroup is the group whose members may use klockd.
	DefaultGroup = "klock"
)

// SocketPath is the socket clients use: $KLOCK_SOCKET, else DefaultSocket.
func SocketPath() string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	return DefaultSocket
}

// Dial connects to klockd at path (SocketPath() when empty). It fails with
// ErrNoDaemon when nothing listens there (no socket, or a stale one), and
// with ErrForbidden when the socket's permissions keep the caller out.
func Dial(path string) (*net.UnixConn, error) {
	if path == "" {
		path = SocketPath()
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOTDIR):
		return nil, fmt.Errorf("%w (%s: %v)", ErrNoDaemon, path, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return nil, fmt.Errorf("%w: cannot connect to %s: %v (klockd serves root and the %s group)", ErrForbidden, path, err, DefaultGroup)
	default:
		return nil, fmt.Errorf("klockd: %w", err)
	}
}

// Refusal returns the error klockd sent before it closed the connection
// (it refuses a peer before reading its request, so the request's write
// may fail), else err.
func Refusal(c *net.UnixConn, err error) error {
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	var r Message
	if fs, rerr := ReadFrame(c, MaxReplyFrame, &r); rerr == nil {
		CloseAll(fs)
		if r.Type == TypeError && r.Error != nil {
			return r.Error
		}
	}
	return err
}
