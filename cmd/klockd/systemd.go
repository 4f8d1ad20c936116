package main

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"

	"github.com/coreos/go-systemd/v22/activation"
	sd "github.com/coreos/go-systemd/v22/daemon"
)

// systemdSockets are the sockets systemd passed (socket activation:
// deploy/systemd/klockd.socket), by use; nil when klockd makes its own.
type systemdSockets struct {
	session, api *net.UnixListener
}

// activated takes the listening sockets systemd passed (LISTEN_FDS, for
// this pid: sd_listen_fds(3)) and matches each to --socket or
// --api-socket by its path. A socket matching neither is the .socket
// unit's and klockd's settings disagreeing: an error, rather than a
// klockd serving where no client looks.
func activated(o *options) (systemdSockets, error) {
	var out systemdSockets
	for _, f := range activation.Files(true) {
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return out, fmt.Errorf("a socket systemd passed: %w", err)
		}
		uln, ok := ln.(*net.UnixListener)
		if !ok {
			ln.Close()
			return out, fmt.Errorf("systemd passed %s, not a unix socket", ln.Addr())
		}
		switch path := filepath.Clean(uln.Addr().String()); path {
		case filepath.Clean(o.socket):
			out.session = uln
		case filepath.Clean(*o.api.socket):
			out.api = uln
		default:
			uln.Close()
			return out, fmt.Errorf("systemd passed the socket %s, which is neither --socket (%s) nor --api-socket (%s)", path, o.socket, *o.api.socket)
		}
	}
	return out, nil
}

// sd_notify(3) states: klockd's unit is Type=notify, so systemd counts it
// started once the BPF programs are loaded and the sockets served.
const (
	sdReady     = sd.SdNotifyReady
	sdReloading = sd.SdNotifyReloading
	sdStopping  = sd.SdNotifyStopping
)

// notify tells systemd a state; nothing when not run by systemd.
func notify(log *slog.Logger, state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		log.Warn("sd_notify", "state", state, "error", err)
	}
}
