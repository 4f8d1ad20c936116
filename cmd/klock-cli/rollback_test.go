//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// TestRollbackLimitedByTheLog: klock rollback restores what the session's
// verification log says the agent touched, and leaves what another process
// did in the same shared scope, unless --all. Real files, a real backup.
func TestRollbackLimitedByTheLog(t *testing.T) {
	base := t.TempDir()
	wd, shared := filepath.Join(base, "wd"), filepath.Join(base, "shared")
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return "<absent>"
		}
		return string(b)
	}
	write(filepath.Join(wd, "src", "a.go"), "v1\n")
	write(filepath.Join(shared, "agent.txt"), "agent v1\n")
	write(filepath.Join(shared, "theirs.txt"), "theirs v1\n")
	mpath := filepath.Join(base, "m.yaml")
	src := strings.Join([]string{
		"apiVersion: klock/v1", "agent: {id: t}", "mode: strict", "workdir: " + wd, "baseline: none",
		"intents:", "  - MUTATES FILE:${workdir}/**", "  - MUTATES FILE:" + shared + "/**", "  - PROVIDES FILE:" + shared + "/**",
		"declared_tools: []",
		"cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: \"0.01 USD\", max_cost: \"0.02 USD\"}",
	}, "\n") + "\n"
	write(mpath, src)
	m, err := policy.Load(mpath)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	const id = "20261122T000000-abcdef"
	if _, err := snapshot.Take(context.Background(), rs, snapshot.Options{Dir: session.BackupsDir(wd), Session: id,
		Scopes: []snapshot.Scope{{Path: wd, Tree: true}, {Path: shared, Tree: true}}}); err != nil {
		t.Fatal(err)
	}
	// The session: the agent edits a.go and agent.txt and creates mine.txt;
	// meanwhile another process edits theirs.txt and creates new.txt.
	write(filepath.Join(wd, "src", "a.go"), "v2\n")
	write(filepath.Join(shared, "agent.txt"), "agent v2\n")
	write(filepath.Join(shared, "mine.txt"), "mine\n")
	write(filepath.Join(shared, "theirs.txt"), "theirs v2\n")
	write(filepath.Join(shared, "new.txt"), "new\n")
	lg := map[string]any{"schema": vlog.Schema, "observed": []map[string]any{
		{"triple": "MUTATES FILE:" + filepath.Join(wd, "src", "a.go")},
		{"triple": "MUTATES FILE:" + filepath.Join(shared, "agent.txt")},
		{"triple": "PROVIDES FILE:" + filepath.Join(shared, "mine.txt")},
		{"triple": "CONSUMES NET:10.0.0.1:443/tcp"},
	}, "lost": map[string]any{"total": 0}}
	data, _ := json.Marshal(lg)
	write(filepath.Join(session.DefaultLogDir(wd), id, vlog.FileName), string(data))

	out, code := run(t, "rollback", "-m", mpath, id)
	if code != exitOK {
		t.Fatalf("rollback: exit %d\n%s", code, out)
	}
	for p, want := range map[string]string{
		filepath.Join(wd, "src", "a.go"):    "v1\n",
		filepath.Join(shared, "agent.txt"):  "agent v1\n",
		filepath.Join(shared, "mine.txt"):   "<absent>",
		filepath.Join(shared, "theirs.txt"): "theirs v2\n", // another process's: kept
		filepath.Join(shared, "new.txt"):    "new\n",
	} {
		if got := read(p); got != want {
			t.Errorf("after rollback: %s = %q, want %q\n%s", p, got, want, out)
		}
	}
	out, code = run(t, "rollback", "-m", mpath, "--all", id)
	if code != exitOK {
		t.Fatalf("rollback --all: exit %d\n%s", code, out)
	}
	if got := read(filepath.Join(shared, "theirs.txt")); got != "theirs v1\n" {
		t.Errorf("after --all: theirs.txt = %q, want theirs v1", got)
	}
	if got := read(filepath.Join(shared, "new.txt")); got != "<absent>" {
		t.Errorf("after --all: new.txt = %q, want it removed", got)
	}
	// Without a log to read, everything, and it says so.
	write(filepath.Join(shared, "new.txt"), "new\n")
	if err := os.RemoveAll(filepath.Join(session.DefaultLogDir(wd), id)); err != nil {
		t.Fatal(err)
	}
	out, code = run(t, "rollback", "-m", mpath, id)
	if code != exitOK || !strings.Contains(out, "restoring everything the backup holds") || read(filepath.Join(shared, "new.txt")) != "<absent>" {
		t.Errorf("rollback without a log: exit %d, new.txt %q\n%s", code, read(filepath.Join(shared, "new.txt")), out)
	}
}

// TestRollbackLimitOfAnIncompleteLog: the log of a session whose klock was
// killed (written when it started, INCOMPLETE) does not say what the agent
// touched, so it cannot limit a rollback; the reason says so.
func TestRollbackLimitOfAnIncompleteLog(t *testing.T) {
	wd := t.TempDir()
	const id = "20261124T000000-abcdef"
	l := vlog.New(vlog.Session{ID: id, Agent: "a", Mode: policy.ModeStrict})
	l.Begin(4242)
	if _, err := l.Write(filepath.Join(session.DefaultLogDir(wd), id)); err != nil {
		t.Fatal(err)
	}
	roots, _, _, why := session.RollbackLimit(wd, "", id)
	if roots != nil || !strings.Contains(why, "INCOMPLETE") {
		t.Fatalf("rollbackLimit = %v, %q; want no limit, saying the log is INCOMPLETE", roots, why)
	}
}

// TestRollbackRefusesLaterChanges: a file edited after the session ended
// is someone else's work (the agent was gone): klock rollback refuses,
// lists it and changes nothing; --include-later restores it too.
func TestRollbackRefusesLaterChanges(t *testing.T) {
	wd, mpath, rs := twoFileWorkdir(t)
	a, b := filepath.Join(wd, "src", "a.go"), filepath.Join(wd, "src", "b.go")
	const id = "20261124T000000-later0"
	if _, err := snapshot.Take(context.Background(), rs, snapshot.Options{Dir: session.BackupsDir(wd), Session: id, Scopes: []snapshot.Scope{{Path: wd, Tree: true}}}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(a, []byte("a by the agent\n"), 0o644) // the session
	l := vlog.New(vlog.Session{ID: id, Agent: "t", Mode: policy.ModeStrict})
	l.Finish(time.Now(), vlog.Exit{}, nil)
	if _, err := l.Write(filepath.Join(session.DefaultLogDir(wd), id)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(b, []byte("b by the user, later\n"), 0o644) // after the session

	out, code := runErr(t, "rollback", "-m", mpath, id)
	if code != exitRefused || !strings.Contains(out, "changed after the session ended") || !strings.Contains(out, b) || !strings.Contains(out, "--include-later") {
		t.Fatalf("rollback with a later edit: exit %d, want %d and the path listed\n%s", code, exitRefused, out)
	}
	if got, _ := os.ReadFile(a); string(got) != "a by the agent\n" {
		t.Fatalf("a refused rollback changed a.go: %q", got)
	}
	out, code = run(t, "rollback", "-m", mpath, "--include-later", id)
	if code != exitOK {
		t.Fatalf("rollback --include-later: exit %d\n%s", code, out)
	}
	for p, want := range map[string]string{a: "a v1\n", b: "b v1\n"} {
		if got, _ := os.ReadFile(p); string(got) != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	// Done: what the restore itself wrote is not "later" to a second run.
	if out, code = run(t, "rollback", "-m", mpath, id); code != exitOK {
		t.Fatalf("a second rollback after a finished one: exit %d\n%s", code, out)
	}
}

// runErr is run with the error klock would print appended to the output.
func runErr(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, code, err := execute(args...)
	if err != nil {
		out += "klock: " + err.Error() + "\n"
	}
	return out, code
}

// twoFileWorkdir is a workdir with src/a.go and src/b.go ("a v1", "b v1")
// and a strict manifest that lets the agent change all of it.
func twoFileWorkdir(t *testing.T) (wd, mpath string, rs *policy.Ruleset) {
	t.Helper()
	base := t.TempDir()
	wd = filepath.Join(base, "wd")
	if err := os.MkdirAll(filepath.Join(wd, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(wd, "src", "a.go"), []byte("a v1\n"), 0o644)
	os.WriteFile(filepath.Join(wd, "src", "b.go"), []byte("b v1\n"), 0o644)
	mpath = filepath.Join(base, "m.yaml")
	os.WriteFile(mpath, []byte(strings.Join([]string{
		"apiVersion: klock/v1", "agent: {id: t}", "mode: strict", "workdir: " + wd, "baseline: none",
		"intents:", "  - MUTATES FILE:${workdir}/**",
		"cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: \"0.01 USD\", max_cost: \"0.02 USD\"}",
	}, "\n")+"\n"), 0o644)
	m, err := policy.Load(mpath)
	if err != nil {
		t.Fatal(err)
	}
	rs, err = policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	return wd, mpath, rs
}

// TestRollbackAfterAnotherSessionsRestoreKeepsLaterWork (a data loss once):
// sessions A and B end cleanly, the user then writes important-B.txt,
// session C is killed and rolled back. C's restore wrote after the user's
// file, but it did not put that file there: rolling back A must still
// refuse (with its own exit status) and leave the file, and --include-later
// is what restores everything.
func TestRollbackAfterAnotherSessionsRestoreKeepsLaterWork(t *testing.T) {
	wd, mpath, rs := twoFileWorkdir(t)
	a, b := filepath.Join(wd, "src", "a.go"), filepath.Join(wd, "src", "b.go")
	important := filepath.Join(wd, "important-B.txt")
	take := func(id string) *snapshot.Snapshot {
		t.Helper()
		s, err := snapshot.Take(context.Background(), rs, snapshot.Options{Dir: session.BackupsDir(wd), Session: id, Scopes: []snapshot.Scope{{Path: wd, Tree: true}}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	end := func(id string) {
		t.Helper()
		l := vlog.New(vlog.Session{ID: id, Agent: "t", Mode: policy.ModeStrict})
		l.Finish(time.Now(), vlog.Exit{}, nil)
		if _, err := l.Write(filepath.Join(session.DefaultLogDir(wd), id)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	const idA, idB, idC = "20261125T000001-sessA", "20261125T000002-sessB", "20261125T000003-sessC"
	take(idA)
	os.WriteFile(a, []byte("a by A\n"), 0o644)
	end(idA)
	take(idB)
	os.WriteFile(b, []byte("b by B\n"), 0o644)
	os.WriteFile(filepath.Join(wd, "src", "new-by-B.go"), []byte("B\n"), 0o644)
	end(idB)
	os.WriteFile(important, []byte("the user's\n"), 0o644)
	time.Sleep(10 * time.Millisecond)
	sc := take(idC)
	os.WriteFile(filepath.Join(wd, "c.txt"), []byte("C\n"), 0o644) // C's agent, then the kill
	if _, err := sc.Restore(context.Background(), snapshot.SpareOthersNew(), snapshot.Only(snapshot.Scope{Path: wd, Tree: true})); err != nil {
		t.Fatal(err)
	}
	end(idC)

	out, code := runErr(t, "rollback", "-m", mpath, idA)
	if code != exitRefused || !strings.Contains(out, important) || !strings.Contains(out, b) || !strings.Contains(out, "--include-later") {
		t.Errorf("rollback of A after C's restore: exit %d, want %d (refused) listing %s and %s\n%s", code, exitRefused, important, b, out)
	}
	if got, err := os.ReadFile(important); err != nil || string(got) != "the user's\n" {
		t.Fatalf("the user's file after the rollback of A: %q, %v", got, err)
	}
	// --all widens what is restored, not when.
	if out, code = runErr(t, "rollback", "-m", mpath, "--all", idA); code != exitRefused {
		t.Errorf("rollback --all of A: exit %d, want %d (refused)\n%s", code, exitRefused, out)
	}
	if out, code = run(t, "rollback", "-m", mpath, "--include-later", idA); code != exitOK {
		t.Fatalf("rollback --include-later: exit %d\n%s", code, out)
	}
	if _, err := os.Lstat(important); !os.IsNotExist(err) {
		t.Errorf("--include-later left %s (%v): it asks for everything since A", important, err)
	}
}

// TestBackupsGCThenRollback: klock backups gc prints a summary a person
// reads (--json for machines), and rolling back a session it collected
// says that, which session, and what is left to do.
func TestBackupsGCThenRollback(t *testing.T) {
	wd := t.TempDir()
	if err := os.WriteFile(filepath.Join(wd, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs := &policy.Ruleset{Workdir: wd, Files: []policy.PathRule{{Pattern: policy.PathPattern{Path: wd, Match: policy.MatchSubtree}, Access: policy.AccessOf(policy.Mutates), Grants: policy.Grants(policy.Mutates)}}}
	dir := session.BackupsDir(wd)
	ids := []string{"20261122T000000-aaaaaa", "20261122T000001-bbbbbb", "20261122T000002-cccccc"}
	for _, id := range ids {
		if _, err := snapshot.Take(context.Background(), rs, snapshot.Options{Dir: dir, Session: id, Scopes: []snapshot.Scope{{Path: wd, Tree: true}}}); err != nil {
			t.Fatal(err)
		}
	}
	out, code := run(t, "backups", "gc", "--dir", dir, "--keep", "2")
	if code != exitOK || strings.Contains(out, "{") || !strings.Contains(out, "removed  "+ids[0]) || !strings.Contains(out, "kept the newest 2") {
		t.Fatalf("klock backups gc: exit %d:\n%s", code, out)
	}
	out, code = run(t, "backups", "gc", "--dir", dir, "--keep", "2", "--json")
	var rep snapshot.GCReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Kept) != 2 {
		t.Fatalf("klock backups gc --json: exit %d:\n%s", code, out)
	}
	_, code, err := execute("rollback", "--dir", dir, ids[0])
	if code != exitInvalid || !errors.Is(err, snapshot.ErrCollected) {
		t.Fatalf("rollback of a collected session: exit %d, %v", code, err)
	}
	for _, want := range []string{ids[0], "klock backups gc", "klock log -m MANIFEST " + ids[0]} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}
