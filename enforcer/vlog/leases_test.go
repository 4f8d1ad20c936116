package vlog

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
)

// TestLeasesInLog: the leases a session held, how it waited for them and
// the paths its rollback left to another session are in the file (read
// back as written) and in the summary; a path left is not counted as
// restored.
func TestLeasesInLog(t *testing.T) {
	l := New(Session{ID: "s-2", Agent: "coder", Mode: policy.ModeStrict, Start: t0,
		Leases: []HeldLease{
			{ID: "l-1", Lease: "MUTATES FILE:/srv/repo/src/**", Acquired: t0},
			{ID: "l-2", Lease: "CONSUMES FILE:/usr/**", Baseline: true, Acquired: t0},
			{ID: "l-3", Lease: "CONSUMES FILE:/etc/hosts", Baseline: true, Acquired: t0, End: "Revoked"},
		},
		LeaseWait: &LeaseWait{WaitedMS: 1500, Attempts: 4, Waits: 1, Deaths: 2, Behind: []LeaseHolder{
			{Session: "s-1", Agent: "reviewer", Lease: "MUTATES FILE:/srv/repo/**", Intent: "MUTATES FILE:/srv/repo/src/**"}}},
	})
	l.Finish(t0.Add(time.Second), Exit{Signal: "SIGKILL", KilledByKlock: true, Reason: "ended from outside: leases revoked"}, []RollbackOp{
		{Path: "/srv/repo/src/a.go", Action: RollbackRestored, OK: true},
		{Path: "/srv/repo/docs/x.md", Action: RollbackLeft, OK: true, Why: "session s-3 (agent writer) holds MUTATES FILE:/srv/repo/docs/**"},
	})
	if _, summary := l.Headline(); !strings.Contains(summary, "1 file restored") {
		t.Errorf("headline %q: the left path counted as restored, or the restored one not", summary)
	}
	dir := t.TempDir()
	if _, err := l.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Leases, l.Leases) || !reflect.DeepEqual(back.LeaseWait, l.LeaseWait) || !reflect.DeepEqual(back.Rollback, l.Rollback) {
		t.Fatalf("read back %+v %+v %+v", back.Leases, back.LeaseWait, back.Rollback)
	}
	var out bytes.Buffer
	if err := Render(&out, back, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Leases (KLIS) held: 3",
		"l-1  MUTATES FILE:/srv/repo/src/**",
		"2 more for the baseline's intents",
		"waited 1.5s for them: 4 attempts (1 WAIT, 2 DIE)",
		"behind session s-1 (agent reviewer) holding MUTATES FILE:/srv/repo/**, against its own MUTATES FILE:/srv/repo/src/**",
		"left      /srv/repo/docs/x.md  (session s-3 (agent writer) holds MUTATES FILE:/srv/repo/docs/**)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := Render(&out, back, RenderOptions{Verbose: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "CONSUMES FILE:/etc/hosts  REVOKED before the session ended") {
		t.Errorf("verbose summary lacks the revoked baseline lease:\n%s", out.String())
	}
	// A log of a klock that took no leases shows no section.
	out.Reset()
	plain := New(Session{ID: "s-0", Start: t0})
	plain.Finish(t0.Add(time.Second), Exit{Code: ExitCode(0)}, nil)
	if err := Render(&out, plain, RenderOptions{}); err != nil || strings.Contains(out.String(), "Leases") {
		t.Errorf("a log without leases: %v\n%s", err, out.String())
	}
}
