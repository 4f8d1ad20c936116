//go:build linux

package svccheck

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

// Installed follows the unit files in the search path; reachable follows
// a real klockd answering ps on its socket.
func TestCheckRealKlockd(t *testing.T) {
	testutil.RequirePrivileged(t)
	units := t.TempDir()
	old := UnitDirs
	UnitDirs = []string{units}
	defer func() { UnitDirs = old }()
	dir := testutil.OpenDir(t, -1)
	sock := filepath.Join(dir, "klockd.sock")

	st := Check(context.Background(), sock)
	if st.Installed || st.Reachable || len(st.Why) == 0 {
		t.Fatalf("nothing installed or running: %+v", st)
	}
	for _, u := range Units {
		if err := os.WriteFile(filepath.Join(units, u), []byte("[Unit]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := testutil.BuildCommand(t, t.TempDir(), "klockd")
	cmd := exec.Command(bin, "--config", "", "--socket", sock, "--api-socket", filepath.Join(dir, "api.sock"))
	log := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st = Check(context.Background(), sock); st.Reachable {
			break
		}
	}
	if !st.Reachable || st.Sessions != 0 || st.UnitFiles["klockd.service"] != filepath.Join(units, "klockd.service") {
		t.Fatalf("klockd running: %+v\n%s", st, log.String())
	}
	// The binary is found beside the running executable or on PATH; the
	// test binary has no klockd beside it, so PATH decides.
	t.Setenv("PATH", filepath.Dir(bin))
	if st = Check(context.Background(), sock); !st.Installed || st.Binary != bin {
		t.Fatalf("installed: %+v", st)
	}
	if _, err := os.Stat("/run/systemd/system"); err != nil && !strings.Contains(strings.Join(st.Why, "\n"), "systemd is not running") {
		t.Fatalf("without systemd: %+v", st)
	}
}
