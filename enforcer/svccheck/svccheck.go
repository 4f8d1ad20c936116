package svccheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
)

// UnitDirs are where systemd looks for system units, admin's first
// (systemd.unit(5), "System Unit Search Path").
var UnitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// Units are klockd's units.
var Units = []string{"klockd.socket", "klockd.service"}

// Status is klockd as a service.
type Status struct {
	// Installed: both units and the klockd binary were found.
	Installed bool              `json:"installed"`
	UnitFiles map[string]string `json:"unit_files"` // unit -> path ("" when missing)
	Binary    string            `json:"binary,omitempty"`
	// Systemd: systemd is PID 1 here; Enabled is then each unit's
	// systemctl is-enabled answer.
	Systemd bool              `json:"systemd"`
	Enabled map[string]string `json:"enabled,omitempty"`
	// Reachable: klockd answered ps on Socket.
	Reachable bool   `json:"reachable"`
	Socket    string `json:"socket"`
	Sessions  int    `json:"sessions"`
	// Why says what is missing, one line each.
	Why []string `json:"why,omitempty"`
	// Fleet is set on a host whose klockd shares its leases with a
	// fleet on etcd.
	Fleet *Fleet `json:"fleet,omitempty"`
}

// Check looks at the host; socket is klockd's ("" for the default).
func Check(ctx context.Context, socket string) Status {
	st := Status{UnitFiles: map[string]string{}, Socket: socket}
	if st.Socket == "" {
		st.Socket = daemon.SocketPath()
	}
	st.installed()
	st.enabled(ctx)
	st.reachable()
	st.Fleet = checkFleet(ctx)
	return st
}

func (st *Status) installed() {
	found := true
	for _, u := range Units {
		st.UnitFiles[u] = ""
		for _, d := range UnitDirs {
			if p := filepath.Join(d, u); exists(p) {
				st.UnitFiles[u] = p
				break
			}
		}
		if st.UnitFiles[u] == "" {
			found = false
			st.Why = append(st.Why, u+" is not installed (make install, or the klock package)")
		}
	}
	st.Binary = binary()
	if st.Binary == "" {
		found = false
		st.Why = append(st.Why, "no klockd binary beside klock or on PATH")
	}
	st.Installed = found
}

// binary is klockd beside the running klock, else on PATH.
func binary() string {
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "klockd"); exists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("klockd"); err == nil {
		return p
	}
	return ""
}

func (st *Status) enabled(ctx context.Context) {
	// sd_booted(3): systemd is PID 1 when /run/systemd/system exists.
	if !exists("/run/systemd/system") {
		comm, _ := os.ReadFile("/proc/1/comm")
		st.Why = append(st.Why, fmt.Sprintf("systemd is not running (PID 1 is %s): nothing can be enabled here", strings.TrimSpace(string(comm))))
		return
	}
	st.Systemd = true
	st.Enabled = map[string]string{}
	for _, u := range Units {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		// is-enabled prints the state and exits non-zero for "disabled":
		// the text is the answer.
		out, _ := exec.CommandContext(ctx, "systemctl", "is-enabled", u).Output()
		cancel()
		state := strings.TrimSpace(string(out))
		if state == "" {
			state = "unknown"
		}
		st.Enabled[u] = state
	}
	if st.Enabled["klockd.socket"] != "enabled" && st.Enabled["klockd.service"] != "enabled" {
		st.Why = append(st.Why, "neither klockd.socket nor klockd.service is enabled (systemctl enable --now klockd.socket)")
	}
}

func (st *Status) reachable() {
	cl, err := daemon.Dial(st.Socket)
	if err != nil {
		st.Why = append(st.Why, fmt.Sprintf("klockd is not reachable: %v", err))
		return
	}
	defer cl.Close()
	ss, err := cl.PS()
	if err != nil {
		st.Why = append(st.Why, fmt.Sprintf("klockd did not answer ps on %s: %v", st.Socket, err))
		return
	}
	st.Reachable, st.Sessions = true, len(ss)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
