//go:build linux

package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/leaseapi"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/testutil"
)

// waitUntil polls cond until it holds, failing the test with log after 30s.
func waitUntil(t *testing.T, what string, log *testutil.SyncBuffer, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: timed out\n%s", what, log.String())
}

// stopKlockd sends SIGTERM and expects a clean exit.
func stopKlockd(t *testing.T, cmd *exec.Cmd, log *testutil.SyncBuffer) {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("klockd on SIGTERM: %v\n%s", err, log.String())
	}
}

// Under socket activation klockd serves the listening socket systemd
// passes (LISTEN_FDS, LISTEN_PID: sd_listen_fds(3)) as its maker made it,
// and leaves its file when it stops; klock ps gets an answer through it.
func TestKlockdSocketActivation(t *testing.T) {
	testutil.RequirePrivileged(t)
	bins := testutil.OpenDir(t, -1)
	klockd := testutil.BuildCommand(t, bins, "klockd")
	klock := testutil.BuildCommand(t, bins, "klock")
	dir := testutil.OpenDir(t, -1)
	sock, api := filepath.Join(dir, "klockd.sock"), filepath.Join(dir, "api.sock")
	// In the lease API's, then the session's order: klockd matches them by
	// path, not by place.
	files := []*os.File{passSocket(t, api), passSocket(t, sock)}
	// The mode systemd's SocketMode= would set; klockd must not change it.
	if err := os.Chmod(sock, 0o604); err != nil {
		t.Fatal(err)
	}
	cmd := activatedKlockd(klockd, files, "--config", "", "--socket", sock, "--api-socket", api)
	log := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	waitUntil(t, "klockd serving the passed socket", log, func() bool { return strings.Contains(log.String(), "systemd_socket=true") })
	ps := exec.Command(klock, "ps")
	ps.Env = append(os.Environ(), daemon.SocketEnv+"="+sock)
	out, err := ps.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SESSION") {
		t.Fatalf("klock ps through the passed socket: %v\n%s\nklockd:\n%s", err, out, log.String())
	}
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o604 {
		t.Fatalf("klockd changed the passed socket: %v %v", st.Mode(), err)
	}
	cl := leaseapi.Dial(api)
	defer cl.Close()
	r, err := cl.Acquire(context.Background(), leaseapi.ManifestRequest{AgentID: "orch", SessionID: "s1", Intents: []string{"MUTATES FILE:/srv/x/**"}})
	if err != nil || r.Outcome != "GRANTED" {
		t.Fatalf("the lease API on the passed socket: %+v %v\n%s", r, err, log.String())
	}
	stopKlockd(t, cmd, log)
	for _, p := range []string{sock, api} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("klockd removed the socket file systemd made: %v", err)
		}
	}
}

// passSocket listens on path and returns the listening socket as a file,
// as systemd holds it for a .socket unit; the file stays when it closes.
func passSocket(t *testing.T, path string) *os.File {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// activatedKlockd is klockd started as systemd starts a socket-activated
// service: the sockets from fd 3 on (SD_LISTEN_FDS_START), LISTEN_FDS
// their number and LISTEN_PID its own pid, which the shell sets to its pid
// and keeps as it becomes klockd (exec keeps the pid).
func activatedKlockd(klockd string, files []*os.File, args ...string) *exec.Cmd {
	script := fmt.Sprintf(`LISTEN_PID=$$ LISTEN_FDS=%d exec "$0" "$@"`, len(files))
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, klockd}, args...)...)
	cmd.ExtraFiles = files
	return cmd
}

// A socket systemd passes that matches neither --socket nor --api-socket
// is a configuration error: klockd says so and stops.
func TestKlockdRefusesForeignSocket(t *testing.T) {
	testutil.RequirePrivileged(t)
	klockd := testutil.BuildCommand(t, t.TempDir(), "klockd")
	dir := testutil.OpenDir(t, -1)
	f := passSocket(t, filepath.Join(dir, "other.sock"))
	defer f.Close()
	cmd := activatedKlockd(klockd, []*os.File{f}, "--config", "", "--socket", filepath.Join(dir, "klockd.sock"), "--api-socket", filepath.Join(dir, "api.sock"))
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "neither --socket") {
		t.Fatalf("klockd given a foreign socket: %v\n%s", err, out)
	}
}

// A session running across a SIGHUP survives it, and the reloaded file's
// settings take effect: the log turns JSON, and --require-signed from the
// file refuses the next unsigned manifest. A setting that needs a restart
// is named in the log.
func TestKlockdReloadKeepsSessions(t *testing.T) {
	testutil.RequirePrivileged(t)
	bins := testutil.OpenDir(t, -1)
	klockd := testutil.BuildCommand(t, bins, "klockd")
	testutil.BuildCommand(t, bins, "klock-stage2")
	dir := testutil.OpenDir(t, -1)
	conf := filepath.Join(dir, "klockd.yaml")
	writeFile(t, conf, "log_level: info\nrequire_signed: false\n")
	sock := filepath.Join(dir, "klockd.sock")
	cmd := exec.Command(klockd, "--config", conf, "--socket", sock, "--api-socket", filepath.Join(dir, "api.sock"))
	log := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopKlockd(t, cmd, log)
	waitUntil(t, "klockd listening", log, func() bool { _, err := os.Stat(sock); return err == nil })

	wd := agentDir(t)
	gate := filepath.Join(wd, "go")
	data := []byte(testutil.ManifestYAML("reload-test", "strict", wd, "CONSUMES FILE:${workdir}/**", "PROVIDES PROC:/usr/bin/**"))
	type outcome struct {
		res *session.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := runVia(sock, data, "while [ ! -e "+gate+" ]; do sleep 0.1; done")
		done <- outcome{res, err}
	}()
	waitUntil(t, "the session running", log, func() bool { return len(sessions(t, sock)) == 1 })

	// A file klockd cannot apply (signatures required, no key trusted)
	// is refused whole: the running settings stay.
	writeFile(t, conf, "log_format: json\nrequire_signed: true\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the refused reload logged", log, func() bool { return strings.Contains(log.String(), `msg="reload refused: settings unchanged"`) })
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, conf, "log_format: json\nrequire_signed: true\napi_rate: 5\nsyscall_linger: 0s\ntrust:\n  - ed25519:"+base64.StdEncoding.EncodeToString(pub)+"\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reload logged in JSON", log, func() bool { return strings.Contains(log.String(), `"msg":"configuration reloaded"`) })
	if !strings.Contains(log.String(), `"settings":["api-rate"]`) {
		t.Errorf("the restart-only setting is not named:\n%s", log.String())
	}
	if !strings.Contains(log.String(), `"applied":["log-format","require-signed","syscall-linger","trust"]`) {
		t.Errorf("the live settings applied are not named:\n%s", log.String())
	}
	if n := len(sessions(t, sock)); n != 1 {
		t.Fatalf("%d sessions after SIGHUP, want the one running", n)
	}
	if _, err := runVia(sock, data, "true"); err == nil || !strings.Contains(err.Error(), "manifest is not signed") {
		t.Fatalf("an unsigned manifest after require_signed was reloaded: %v", err)
	}
	writeFile(t, gate, "")
	o := <-done
	if o.err != nil || o.res.Killed || o.res.Exit.ExitCode() != 0 {
		t.Fatalf("the session across the reload: %+v %v\n%s", o.res, o.err, log.String())
	}
}

// A bad configuration file stops klockd before anything starts, naming
// the file, the line and the key; a flag on the command line overrides the
// file.
func TestKlockdConfigErrors(t *testing.T) {
	klockd := testutil.BuildCommand(t, t.TempDir(), "klockd")
	dir := t.TempDir()
	conf := filepath.Join(dir, "klockd.yaml")
	for data, want := range map[string]string{
		"log_level: info\nsyscall_lingr: 2s\n": conf + `:2: unknown key "syscall_lingr"`,
		"log_format: xml\n":                    "log format must be text or json",
		"log_level: loud\n":                    "log level must be",
		"require_signed: sometimes\n":          conf + `:1: bad value "require_signed"`,
	} {
		writeFile(t, conf, data)
		out, err := exec.Command(klockd, "--config", conf).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), want) {
			t.Errorf("%q: %v\n%s", data, err, out)
		}
	}
	// The command line's --log-format wins over the file's bad one: klockd
	// gets past its settings, to its root check or (as root) to the next
	// error, an --api-tokens without --api-listen.
	writeFile(t, conf, "log_format: xml\n")
	out, _ := exec.Command(klockd, "--config", conf, "--log-format", "json", "--api-tokens", "t").CombinedOutput()
	if !strings.Contains(string(out), "needs root") && !strings.Contains(string(out), "--api-listen, which is not set") {
		t.Errorf("the command line did not override the file:\n%s", out)
	}
	if out, err := exec.Command(klockd, "--config", filepath.Join(dir, "missing.yaml")).CombinedOutput(); err == nil || !strings.Contains(string(out), "missing.yaml") {
		t.Errorf("a named missing file: %v\n%s", err, out)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runVia runs script as a strict session through klockd.
func runVia(sock string, manifest []byte, script string) (*session.Result, error) {
	cl, err := daemon.Dial(sock)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Run(context.Background(), &daemon.Run{RunRequest: daemon.RunRequest{
		Manifest: manifest, ManifestPath: "agent.yaml", UID: metricsAgentUID, GID: metricsAgentUID, AllowDegraded: true,
		Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
	}})
}

func sessions(t *testing.T, sock string) []daemon.SessionInfo {
	t.Helper()
	cl, err := daemon.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ss, err := cl.PS()
	if err != nil {
		t.Fatal(err)
	}
	return ss
}
