//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/leaseapi"
	"github.com/klocklabs/klock/internal/testutil"
)

// klockd serves the lease API on --api-socket over its lease store, and
// removes the socket when it stops on SIGTERM.
func TestKlockdServesLeaseAPI(t *testing.T) {
	testutil.RequirePrivileged(t)
	bin := testutil.BuildCommand(t, t.TempDir(), "klockd")
	dir := t.TempDir()
	api := filepath.Join(dir, "run", "api.sock")
	cmd := exec.Command(bin, "--socket", filepath.Join(dir, "run", "klockd.sock"), "--api-socket", api)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	cl := leaseapi.Dial(api)
	defer cl.Close()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	var (
		r   *leaseapi.ManifestResponse
		err error
	)
	for {
		r, err = cl.Acquire(ctx, leaseapi.ManifestRequest{AgentID: "orch", SessionID: "s1", Intents: []string{"MUTATES FILE:/srv/x/**"}})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || r.Outcome != "GRANTED" || r.Leases[0].Tenant != "uid:0" {
		t.Fatalf("acquire through klockd: %+v %v\n%s", r, err, log.String())
	}
	if st, err := os.Stat(api); err != nil || st.Mode().Perm() != 0o660 {
		t.Fatalf("api socket: %v %v", st, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("klockd on SIGTERM: %v\n%s", err, log.String())
	}
	if _, err := os.Stat(api); !os.IsNotExist(err) {
		t.Fatalf("api socket left behind: %v", err)
	}
}

// A lease API on TCP without tokens, or without TLS off loopback, stops
// klockd before it starts, saying why.
func TestKlockdRefusesUnsafeAPIListen(t *testing.T) {
	testutil.RequirePrivileged(t)
	bin := testutil.BuildCommand(t, t.TempDir(), "klockd")
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("orch aaaaaaaaaaaaaaaaaaaaaaaa\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]string{
		"--api-listen 127.0.0.1:0":                      "needs a tokens file",
		"--api-listen 0.0.0.0:0 --api-tokens " + tokens: "not a loopback address",
		"--api-tokens " + tokens:                        "--api-listen, which is not set",
		"--no-api --api-listen 127.0.0.1:0":             "contradict",
	} {
		all := append([]string{"--socket", filepath.Join(dir, "klockd.sock"), "--api-socket", filepath.Join(dir, "api.sock")}, strings.Fields(args)...)
		out, err := exec.Command(bin, all...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), want) {
			t.Errorf("klockd %s: %v\n%s", args, err, out)
		}
	}
}
