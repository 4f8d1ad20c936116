//go:build linux

package usock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"
)

// Owner is who a socket and its directory belong to: root, and the group
// GID when HasGroup (else root's group).
type Owner struct {
	GID      uint32
	HasGroup bool
}

// LookupGroup resolves a group name to the Owner of klockd's sockets;
// HasGroup is false when no such group exists (then only root may connect).
func LookupGroup(name string) Owner {
	g, err := user.LookupGroup(name)
	if err != nil {
		return Owner{}
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return Owner{}
	}
	return Owner{GID: uint32(gid), HasGroup: true}
}

// Own sets path's mode and, when the group exists, its group.
func (o Owner) Own(path string, mode os.FileMode) error {
	if o.HasGroup {
		if err := os.Chown(path, 0, int(o.GID)); err != nil {
			return err
		}
	}
	return os.Chmod(path, mode)
}

// Listen makes the unix socket path: its directory when missing (dirMode,
// owned by o; an existing directory is left as it is), after removing a
// stale socket nobody listens on, with mode owned by o. Errors name the
// path; the caller prefixes its own name.
func Listen(path string, mode, dirMode os.FileMode, o Owner) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, dirMode); err != nil {
			return nil, err
		}
		if err := o.Own(dir, dirMode); err != nil {
			return nil, err
		}
	}
	if err := RemoveStale(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := o.Own(path, mode); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// RemoveStale removes a socket nobody listens on; it refuses to replace a
// live listener's socket or a file that is not a socket.
func RemoveStale(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%w on %s", ErrInUse, path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}

// ErrInUse: something listens on the socket already.
var ErrInUse = errors.New("another server is listening")
