//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/testutil"
)

// TestKlockEventsFollowJSON: `klock events --follow -o json` against a
// real klockd receives a strict session's violation, kill and rollback
// records, each line valid against the schema `klock schema events`
// prints; klockd --events-file holds the same records.
func TestKlockEventsFollowJSON(t *testing.T) {
	testutil.RequirePrivileged(t)
	bins := testutil.OpenDir(t, -1)
	klockd := testutil.BuildCommand(t, bins, "klockd")
	testutil.BuildCommand(t, bins, "klock-stage2")
	klock := testutil.BuildCommand(t, bins, "klock")
	dir := testutil.OpenDir(t, -1)
	sock, file := filepath.Join(dir, "klockd.sock"), filepath.Join(dir, "events.jsonl")
	stopKlockd := startKlockdArgs(t, klockd, sock, "--api-socket", filepath.Join(dir, "api.sock"), "--events-file", file)

	schema, err := exec.Command(klock, "schema", "events").Output()
	if err != nil || !bytes.Equal(schema, eventlog.Schema()) {
		t.Fatalf("klock schema events: %v\n%s", err, schema)
	}
	out := &testutil.SyncBuffer{}
	events := exec.Command(klock, "events", "--follow", "-o", "json", "--socket", sock, "--since", time.Now().UTC().Format(time.RFC3339Nano))
	events.Stdout, events.Stderr = out, out
	if err := events.Start(); err != nil {
		t.Fatal(err)
	}
	wd := agentDir(t)
	data := []byte(testutil.ManifestYAML("events-test", "strict", wd, "CONSUMES FILE:${workdir}/**", "PROVIDES FILE:${workdir}/made", "PROVIDES PROC:/usr/bin/**"))
	res := runStrict(t, sock, data, "echo x > "+wd+"/made; echo x > "+wd+"/undeclared; sleep 5")
	if !res.Killed {
		t.Fatalf("not killed: %+v", res)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), `"kind":"session.end","source":"klockd","session":"`+res.ID); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no session.end from klock events:\n%s", out.String())
		}
	}
	_ = events.Process.Signal(syscall.SIGINT)
	if err := events.Wait(); err != nil {
		t.Errorf("klock events on SIGINT: %v", err)
	}
	got := kindsOf(t, "klock events", []byte(out.String()), res.ID)
	for _, k := range []eventlog.Kind{eventlog.KindSessionStart, eventlog.KindViolation, eventlog.KindKill, eventlog.KindRollback, eventlog.KindSessionEnd} {
		if got[k] == 0 {
			t.Errorf("klock events: no %s record of session %s:\n%s", k, res.ID, out.String())
		}
	}
	stopKlockd() // the file is complete once klockd has stopped
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	inFile := kindsOf(t, "--events-file", b, res.ID)
	for k, n := range got {
		if inFile[k] != n {
			t.Errorf("--events-file has %d %s records, klock events %d", inFile[k], k, n)
		}
	}
}

// kindsOf validates each JSON line and counts session id's records by kind.
func kindsOf(t *testing.T, what string, lines []byte, id string) map[eventlog.Kind]int {
	t.Helper()
	n := map[eventlog.Kind]int{}
	sc := bufio.NewScanner(bytes.NewReader(lines))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if err := eventlog.Validate(sc.Bytes()); err != nil {
			t.Errorf("%s: %v\n%s", what, err, sc.Bytes())
		}
		var r eventlog.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err == nil && r.Session == id {
			n[r.Kind]++
		}
	}
	return n
}

// startKlockdArgs runs klockd with args until the test ends or the
// returned function stops it (SIGTERM, which must end it cleanly).
func startKlockdArgs(t *testing.T, bin, sock string, args ...string) (stop func()) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--socket", sock}, args...)...)
	log := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("klockd on SIGTERM: %v\n%s", err, log.String())
		}
	}
	t.Cleanup(stop)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(log.String(), "klockd listening") {
			return stop
		}
	}
	t.Fatalf("klockd did not start:\n%s", log.String())
	return stop
}

// TestKlockRunEventsFile: an embedded `klock run --events-file` writes a
// strict session's records, as klockd's, labelled "klock run".
func TestKlockRunEventsFile(t *testing.T) {
	testutil.RequirePrivileged(t)
	bins := testutil.OpenDir(t, -1)
	testutil.BuildCommand(t, bins, "klock-stage2")
	klock := testutil.BuildCommand(t, bins, "klock")
	dir := testutil.OpenDir(t, -1)
	wd := agentDir(t)
	mpath, file := filepath.Join(dir, "agent.yaml"), filepath.Join(dir, "events.jsonl")
	data := testutil.ManifestYAML("events-run", "strict", wd, "CONSUMES FILE:${workdir}/**", "PROVIDES FILE:${workdir}/made", "PROVIDES PROC:/usr/bin/**")
	if err := os.WriteFile(mpath, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(klock, "run", "-m", mpath, "--no-daemon", "-q", "--events-file", file, "--",
		"/bin/sh", "-c", "echo x > "+wd+"/made; echo x > "+wd+"/undeclared; sleep 5")
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Fatalf("klock run: %v (want a killed session's exit)\n%s", err, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r eventlog.Record
		if json.Unmarshal([]byte(line), &r) == nil && r.Kind == eventlog.KindSessionStart {
			id = r.Session
			if r.Source != "klock run" {
				t.Errorf("source %q", r.Source)
			}
		}
	}
	got := kindsOf(t, "klock run --events-file", b, id)
	for _, k := range []eventlog.Kind{eventlog.KindSessionStart, eventlog.KindViolation, eventlog.KindKill, eventlog.KindRollback, eventlog.KindSessionEnd, eventlog.KindLeaseGrant} {
		if got[k] == 0 {
			t.Errorf("no %s record of session %q:\n%s", k, id, b)
		}
	}
}

// runStrict runs script through klockd as the agent's uid, under manifest.
func runStrict(t *testing.T, sock string, manifest []byte, script string) *session.Result {
	t.Helper()
	cl, err := daemon.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := cl.Run(context.Background(), &daemon.Run{RunRequest: daemon.RunRequest{
		Manifest: manifest, ManifestPath: "agent.yaml", UID: metricsAgentUID, GID: metricsAgentUID,
		Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
