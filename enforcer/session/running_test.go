//go:build linux

package session

import (
	"bytes"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/klocklabs/klock/enforcer/launch"
)

// TestPermissiveWarningsAreBounded: a learning run amends the scope once
// per new path; the terminal gets the first maxLiveWarnings of them and one
// line saying where the rest are, not a thousand lines.
func TestPermissiveWarningsAreBounded(t *testing.T) {
	var buf bytes.Buffer
	s := &running{log: slog.New(slog.NewTextHandler(&buf, nil))}
	for range maxLiveWarnings + 30 {
		s.warn("scope amended (permissive)", "lease", "PROVIDES FILE:/tmp/x")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != maxLiveWarnings+1 {
		t.Fatalf("%d lines logged, want %d\n%s", len(lines), maxLiveWarnings+1, buf.String())
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "all in the verification log") {
		t.Fatalf("last line %q does not say where the rest are", last)
	}
}

// TestVlogExitNamesTheSignal: the log says SIGKILL, as operators write it,
// not Go's "killed".
func TestVlogExitNamesTheSignal(t *testing.T) {
	if x := vlogExit(launch.Exit{Signal: syscall.SIGKILL}, true, ""); x.Signal != "SIGKILL" || x.Code != nil {
		t.Fatalf("exit %+v, want signal SIGKILL", x)
	}
	if x := vlogExit(launch.Exit{Code: 3}, false, ""); x.Signal != "" || x.Code == nil || *x.Code != 3 {
		t.Fatalf("exit %+v, want code 3", x)
	}
}
