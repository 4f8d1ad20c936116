//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// hold acquires intents for session id in the host's lease store (klock's
// commands read it) and returns its release.
func hold(t *testing.T, id string, intents ...string) func() {
	t.Helper()
	store, err := session.HostLeases()
	if err != nil {
		t.Fatal(err)
	}
	var claims []lease.Claim
	for _, s := range intents {
		in, err := policy.ParseIntent(s)
		if err != nil {
			t.Fatal(err)
		}
		c, _, _ := lease.FromIntent(in)
		claims = append(claims, c)
	}
	h := lease.Holder{Agent: "agent-" + id, Session: id}
	if d, err := store.Acquire(context.Background(), lease.Request{Holder: h, Claims: claims}); err != nil || d.Outcome != lease.Granted {
		t.Fatalf("hold %v: %v %+v", intents, err, d)
	}
	release := func() { store.Release(context.Background(), h) }
	t.Cleanup(release)
	return release
}

// TestRollbackRespectsOtherSessionsLeases: klock rollback of an ended
// session leaves what another session's lease let it change while this
// one ran (its work), and says so; it refuses to restore what a running
// session holds, naming it, unless --leave-held; --force ignores leases.
func TestRollbackRespectsOtherSessionsLeases(t *testing.T) {
	wd, mpath, rs := twoFileWorkdir(t)
	a, b, doc := filepath.Join(wd, "src", "a.go"), filepath.Join(wd, "src", "b.go"), filepath.Join(wd, "docs", "c.md")
	os.MkdirAll(filepath.Dir(doc), 0o755)
	os.WriteFile(doc, []byte("doc v1\n"), 0o644)
	const id = "20261125T000000-lease0"
	if _, err := snapshot.Take(context.Background(), rs, snapshot.Options{Dir: session.BackupsDir(wd), Session: id, Scopes: []snapshot.Scope{{Path: wd, Tree: true}}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// While it runs, another session writes docs/ under its lease and ends.
	done := hold(t, "s-docs", "MUTATES FILE:"+wd+"/docs/**")
	os.WriteFile(doc, []byte("doc v2 by s-docs\n"), 0o644)
	done()
	os.WriteFile(a, []byte("a by the agent\n"), 0o644)
	l := vlog.New(vlog.Session{ID: id, Agent: "t", Mode: policy.ModeStrict, Start: start})
	l.Finish(time.Now(), vlog.Exit{}, nil)
	if _, err := l.Write(filepath.Join(session.DefaultLogDir(wd), id)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)

	// A running session holds b.go: refused, nothing changed.
	releaseB := hold(t, "s-live", "MUTATES FILE:"+b)
	out, code := runErr(t, "rollback", "-m", mpath, id)
	if code != exitRefused || !strings.Contains(out, "session s-live (agent agent-s-live) holds MUTATES FILE:"+b) || !strings.Contains(out, "--leave-held") || !strings.Contains(out, "klock kill s-live") {
		t.Fatalf("rollback under a running session's lease: exit %d, want %d naming it\n%s", code, exitRefused, out)
	}
	if got, _ := os.ReadFile(a); string(got) != "a by the agent\n" {
		t.Fatalf("a refused rollback changed a.go: %q", got)
	}
	os.WriteFile(b, []byte("b by s-live\n"), 0o644)
	out, code = run(t, "rollback", "-m", mpath, "--leave-held", "--include-later", id)
	if code != exitOK {
		t.Fatalf("rollback --leave-held: exit %d\n%s", code, out)
	}
	for p, want := range map[string]string{a: "a v1\n", b: "b by s-live\n", doc: "doc v2 by s-docs\n"} {
		if got, _ := os.ReadFile(p); string(got) != want {
			t.Errorf("%s = %q, want %q\n%s", p, got, want, out)
		}
	}
	for _, want := range []string{"leaving " + wd + "/docs/** as it is: session s-docs (agent agent-s-docs) held until", "leaving " + b + " as it is: session s-live"} {
		if !strings.Contains(out, want) {
			t.Errorf("rollback does not say %q:\n%s", want, out)
		}
	}
	// --force ignores leases: everything goes back.
	out, code = run(t, "rollback", "-m", mpath, "--force", "--include-later", id)
	if code != exitOK {
		t.Fatalf("rollback --force: exit %d\n%s", code, out)
	}
	for p, want := range map[string]string{b: "b v1\n", doc: "doc v1\n"} {
		if got, _ := os.ReadFile(p); string(got) != want {
			t.Errorf("after --force: %s = %q, want %q", p, got, want)
		}
	}
	releaseB()
}

// TestKillRevokesLeases: klock kill of a session klockd does not run
// revokes its leases in the host's store (its klock run then ends it); of
// a session that holds none, it says there is no such session.
func TestKillRevokesLeases(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock") // no klockd
	hold(t, "s-embedded", "MUTATES FILE:/srv/kill-test/**", "CONSUMES FILE:/etc/hosts")
	out, code := run(t, "kill", "--socket", sock, "s-embedded")
	if code != exitOK || !strings.Contains(out, "revoked 2 lease(s) of session s-embedded") {
		t.Fatalf("kill: exit %d\n%s", code, out)
	}
	store, _ := session.HostLeases()
	if left, _ := store.List(context.Background(), lease.Filter{Session: "s-embedded"}); len(left) != 0 {
		t.Fatalf("%d leases left after kill", len(left))
	}
	if out, code := runErr(t, "kill", "--socket", sock, "s-embedded"); code != exitInvalid || !strings.Contains(out, "no session s-embedded") {
		t.Fatalf("kill of a session with no lease: exit %d\n%s", code, out)
	}
}
