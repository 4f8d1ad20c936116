//go:build linux

package e2e

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"log/slog"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// leased is one real session run in the background on a shared lease
// store: its agent's stdout is read line by line, its stdin is a pipe the
// test closes to let it go on (`read` returns).
type leased struct {
	t       *testing.T
	id      string
	out     *bufio.Reader
	in      *os.File // the agent's stdin (send)
	release func()
	done    chan struct{}
	started chan struct{}
	res     *session.Result
	err     error
	logs    *testutil.SyncBuffer
	stderr  *testutil.SyncBuffer
}

type leasedSpec struct {
	leases  lease.Store
	mode    policy.Mode
	intents []string
	script  string // run by sh in the workdir
	wait    time.Duration
	tmp     string // the manifest's tmp field, when set
}

func startLeased(t *testing.T, w *harness.World, s leasedSpec) *leased {
	t.Helper()
	mode := s.mode
	if mode == "" {
		mode = policy.ModeStrict
	}
	data := []byte(harness.ManifestYAML(w.Workdir, mode, append([]string{"PROVIDES PROC:" + dash(t)}, s.intents...)))
	if s.tmp != "" {
		data = append([]byte("tmp: "+s.tmp+"\n"), data...)
	}
	m, err := policy.Parse("m.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l := &leased{t: t, id: harness.NewID(), out: bufio.NewReader(outR), in: inW, done: make(chan struct{}), started: make(chan struct{}), logs: &testutil.SyncBuffer{}, stderr: &testutil.SyncBuffer{}}
	l.release = sync.OnceFunc(func() { inW.Close() })
	t.Cleanup(func() {
		l.release()
		select {
		case <-l.done:
		case <-time.After(60 * time.Second):
			t.Errorf("session %s did not end", l.id)
		}
		outR.Close()
	})
	go func() { // session.Run, not w.Run: no t.Fatal off the test's goroutine
		defer close(l.done)
		defer outW.Close()
		defer inR.Close()
		l.res, l.err = session.Run(context.Background(), session.Options{
			Manifest: m, ManifestData: data, ManifestPath: "m.yaml", ID: l.id, Command: []string{"/bin/sh", "-c", s.script},
			Backend: harness.Backend(), Backends: harness.Shared(), User: &launch.Credential{UID: harness.AgentUID, GID: harness.AgentGID},
			Snapshot: session.Backup(nil), Stdin: inR, Stdout: outW, Stderr: l.stderr, Leases: s.leases, LeaseWait: s.wait,
			Logger:  slog.New(slog.NewTextHandler(l.logs, nil)),
			Started: func(int) { close(l.started) },
		})
	}()
	return l
}

// line waits for the agent's next line of output.
func (l *leased) line(want string) {
	l.t.Helper()
	got := make(chan string, 1)
	go func() {
		s, _ := l.out.ReadString('\n')
		got <- strings.TrimSpace(s)
	}()
	select {
	case s := <-got:
		if s != want {
			<-l.done
			l.t.Fatalf("session %s said %q, want %q: %v %+v\nlog:\n%s", l.id, s, want, l.err, l.res, l.logs.String())
		}
	case <-time.After(60 * time.Second):
		l.t.Fatalf("session %s did not say %q", l.id, want)
	}
}

// send writes a line to the agent's stdin.
func (l *leased) send(line string) {
	l.t.Helper()
	if _, err := l.in.WriteString(line + "\n"); err != nil {
		l.t.Fatalf("session %s: %v", l.id, err)
	}
}

// end lets the agent go on and waits for the session's end.
func (l *leased) end() (*session.Result, error) {
	l.t.Helper()
	l.release()
	select {
	case <-l.done:
	case <-time.After(60 * time.Second):
		l.t.Fatalf("session %s did not end", l.id)
	}
	return l.res, l.err
}

func (l *leased) log() *vlog.Log {
	l.t.Helper()
	lg, err := vlog.Read(l.res.LogPath)
	if err != nil {
		l.t.Fatal(err)
	}
	return lg
}

func ownLeases(lg *vlog.Log) []string {
	var out []string
	for _, h := range lg.Leases {
		if !h.Baseline {
			out = append(out, h.Lease)
		}
	}
	return out
}

// TestLeasedSessionsShareAWorkdir (in process): two strict sessions in one workdir whose MUTATES scopes do not
// overlap run at the same time (the second starts and ends while the first
// runs), both end clean and both changes are there; each log lists its
// leases, and none is held afterwards.
func TestLeasedSessionsShareAWorkdir(t *testing.T) {
	w := harness.NewWorld(t)
	w.File(w.W("a", "x"), "a v1\n")
	w.File(w.W("b", "y"), "b v1\n")
	tbl := lease.NewTable()
	scope := func(d string) []string {
		return []string{"MUTATES FILE:" + w.W(d) + "/**", "PROVIDES FILE:" + w.W(d) + "/**"}
	}
	a := startLeased(t, w, leasedSpec{leases: tbl, intents: scope("a"), script: "echo 'a v2' > a/x; echo up; read go || :"})
	a.line("up")
	b := startLeased(t, w, leasedSpec{leases: tbl, intents: scope("b"), script: "echo 'b v2' > b/y; echo up"})
	b.line("up")
	for _, s := range []*leased{b, a} {
		res, err := s.end()
		if err != nil || res.Killed || res.Exit.ExitCode() != 0 {
			t.Fatalf("session %s: %v %+v\n%s%s", s.id, err, res, s.logs.String(), s.stderr.String())
		}
	}
	if got := w.Content(w.W("a", "x")) + w.Content(w.W("b", "y")); got != "a v2\nb v2\n" {
		t.Fatalf("after both sessions: %q, want both changes", got)
	}
	if la, lb := a.log(), b.log(); !b.log().Start.Before(la.End) || !strings.Contains(strings.Join(ownLeases(la), ","), "MUTATES FILE:"+w.W("a")+"/**") ||
		!strings.Contains(strings.Join(ownLeases(lb), ","), "MUTATES FILE:"+w.W("b")+"/**") {
		t.Fatalf("logs: a %v..%v leases %v; b started %v, leases %v", la.Start, la.End, ownLeases(la), lb.Start, ownLeases(lb))
	}
	if held, _ := tbl.List(context.Background(), lease.Filter{}); len(held) != 0 {
		t.Fatalf("%d leases still held after both sessions ended: %+v", len(held), held[0])
	}
}

// TestOverlappingLeasesRefuseThenWait is the second half of that "Done
// when": while a session holds MUTATES on the whole workdir, a second one
// that would change part of it is refused before it starts anything
// (ErrLeaseConflict naming the first session, its agent, the lease and the
// second's own intent; no log left); with LeaseWait it says whom it waits
// for, starts only once the first has ended, and ends clean, its log
// saying how long it waited and behind whom.
func TestOverlappingLeasesRefuseThenWait(t *testing.T) {
	w := harness.NewWorld(t)
	w.File(w.W("src", "a.go"), "v1\n")
	tbl := lease.NewTable()
	first := startLeased(t, w, leasedSpec{leases: tbl, intents: []string{"MUTATES FILE:" + w.Workdir + "/**"}, script: "echo up; read go || :"})
	first.line("up")

	mine := "MUTATES FILE:" + w.W("src") + "/**"
	second := startLeased(t, w, leasedSpec{leases: tbl, intents: []string{mine, "PROVIDES FILE:" + w.W("src") + "/**"}, script: "echo v2 > src/a.go"})
	if _, err := second.end(); !errors.Is(err, session.ErrLeaseConflict) {
		t.Fatalf("an overlapping session: %v, want ErrLeaseConflict", err)
	}
	var lc *session.LeaseConflictError
	if !errors.As(second.err, &lc) || len(lc.Decision.Conflicts) == 0 || lc.Decision.Conflicts[0].Held.Holder.Session != first.id {
		t.Fatalf("the conflict does not name the first session %s: %+v", first.id, lc)
	}
	for _, want := range []string{first.id, "agent klock-e2e", "MUTATES FILE:" + w.Workdir + "/**", "intent " + mine, "--wait", "klock kill " + first.id, "klock leases"} {
		if !strings.Contains(second.err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, second.err)
		}
	}
	if w.Content(w.W("src", "a.go")) != "v1\n" || w.Exists(w.W(".klock", "sessions", second.id)) || w.Exists(w.W(".klock", "backups", second.id)) {
		t.Fatal("the refused session changed something, or left a log or a backup")
	}

	waiting := startLeased(t, w, leasedSpec{leases: tbl, intents: []string{mine, "PROVIDES FILE:" + w.W("src") + "/**"}, script: "echo v2 > src/a.go", wait: 30 * time.Second})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(waiting.logs.String(), "waiting for session "+first.id+" (agent klock-e2e) holding MUTATES FILE:"+w.Workdir+"/**; retry in") {
		if time.Now().After(deadline) {
			t.Fatalf("no progress line while waiting:\n%s", waiting.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-waiting.started:
		t.Fatal("the waiting session started while the first held the workdir")
	case <-time.After(300 * time.Millisecond):
	}
	firstRes, err := first.end()
	if err != nil || firstRes.Killed {
		t.Fatalf("first: %v %+v", err, firstRes)
	}
	res, err := waiting.end()
	if err != nil || res.Killed || res.Exit.ExitCode() != 0 {
		t.Fatalf("the waiting session: %v %+v\n%s", err, res, waiting.logs.String())
	}
	if w.Content(w.W("src", "a.go")) != "v2\n" {
		t.Fatal("the waiting session's change is not there")
	}
	lg := waiting.log()
	if !lg.Start.After(first.log().End) {
		t.Errorf("the waiting session started %v, before the first ended %v", lg.Start, first.log().End)
	}
	if lw := lg.LeaseWait; lw == nil || lw.WaitedMS <= 0 || lw.Attempts < 2 || len(lw.Behind) == 0 || lw.Behind[0].Session != first.id || lw.Behind[0].Intent != mine {
		t.Errorf("the log does not say how it waited: %+v", lg.LeaseWait)
	}
}

// TestStrictKillLeavesTheNeighbour (in process): of two strict sessions in one workdir, the one killed for a
// violation is rolled back on its own scope byte for byte, while what the
// other changed there before the kill and changes after it stays. The
// killed session's backup holds the whole workdir (it started first), so
// without the neighbour's lease its rollback would restore b/ too; its log
// lists what it left, and whose lease it is.
func TestStrictKillLeavesTheNeighbour(t *testing.T) {
	w := harness.NewWorld(t)
	w.File(w.W("a", "x"), "a v1\n")
	w.File(w.W("a", "keep"), "keep\n")
	w.File(w.W("a", "sub", "deep"), "deep\n")
	w.File(w.W("b", "y"), "b v1\n")
	before := testutil.TreeOf(t, w.W("a"))
	tbl := lease.NewTable()
	scope := func(d string) []string {
		return []string{"MUTATES FILE:" + w.W(d) + "/**", "PROVIDES FILE:" + w.W(d) + "/**"}
	}
	// a: changes its scope, then tries to write into b's (a violation the
	// wall refuses: killed).
	a := startLeased(t, w, leasedSpec{leases: tbl, intents: scope("a"),
		script: "echo 'a v2' > a/x; echo new > a/new; echo 'keep v2' > a/keep; echo up; read go || :; echo intruder > b/y"})
	a.line("up")
	b := startLeased(t, w, leasedSpec{leases: tbl, intents: scope("b"),
		script: "echo 'b v2' > b/y; echo 'b new' > b/new; echo up; read go || :; echo after > b/z"})
	b.line("up")

	res, err := a.end()
	if err != nil || !res.Killed || res.Violation == nil {
		t.Fatalf("a: %v %+v, want killed for its write into b/", err, res)
	}
	if diff := before.Diff(testutil.TreeOf(t, w.W("a"))); len(diff) > 0 {
		t.Errorf("a/ not restored byte for byte:\n%s", strings.Join(diff, "\n"))
	}
	if got := w.Content(w.W("b", "y")) + w.Content(w.W("b", "new")); got != "b v2\nb new\n" {
		t.Errorf("b's changes before the kill: %q, want them kept", got)
	}
	left := map[string]string{}
	for _, op := range a.log().Rollback {
		if op.Action == vlog.RollbackLeft {
			left[op.Path] = op.Why
		}
	}
	for _, p := range []string{w.W("b", "y"), w.W("b", "new")} {
		if !strings.Contains(left[p], "session "+b.id) || !strings.Contains(left[p], " FILE:"+w.W("b")+"/**") {
			t.Errorf("a's log does not say it left %s to session %s: %q (left: %v)", p, b.id, left[p], left)
		}
	}

	res, err = b.end()
	if err != nil || res.Killed || res.Exit.ExitCode() != 0 {
		t.Fatalf("b: %v %+v", err, res)
	}
	if got := w.Content(w.W("b", "y")) + w.Content(w.W("b", "z")); got != "b v2\nafter\n" {
		t.Errorf("b after the kill: %q", got)
	}
}

// TestRevokedSessionEnds: revoking a running session's leases (klock kill
// of an embedded session, klock leases revoke) ends it as an interruption
// from outside: killed, rolled back in strict mode, and its log says its
// leases were revoked.
func TestRevokedSessionEnds(t *testing.T) {
	w := harness.NewWorld(t)
	w.File(w.W("a", "x"), "a v1\n")
	tbl := lease.NewTable()
	s := startLeased(t, w, leasedSpec{leases: tbl, intents: []string{"MUTATES FILE:" + w.W("a") + "/**"},
		script: "echo 'a v2' > a/x; echo up; read go || :"})
	s.line("up")
	<-s.started
	if n, err := tbl.Revoke(context.Background(), s.id); err != nil || n == 0 {
		t.Fatalf("revoke: %d %v", n, err)
	}
	select { // ended by the revocation, not by its stdin
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the session runs on after its leases were revoked")
	}
	res, err := s.end()
	if err != nil || !res.Killed || !res.Interrupted || !strings.Contains(res.Reason, "leases revoked") {
		t.Fatalf("after its leases were revoked: %v %+v", err, res)
	}
	if got := w.Content(w.W("a", "x")); got != "a v1\n" {
		t.Errorf("a/x = %q, want it rolled back", got)
	}
	revoked := 0
	for _, h := range s.log().Leases {
		if h.End == "Revoked" {
			revoked++
		}
	}
	if revoked == 0 || !strings.Contains(s.log().Exit.Reason, "leases revoked") {
		t.Errorf("the log does not say the leases were revoked: %+v %q", s.log().Leases, s.log().Exit.Reason)
	}
}

// TestIntrusionIntoANeighbourIsPutBack: what no wall refuses before its
// effect (a chmod is no Landlock right) an agent can do inside another
// session's leased scope; the tracepoints see it after the fact and strict
// mode kills. Its rollback puts that file back to its state when the
// intruder began (the other session's work before then stays), says so
// naming whose lease it is, and the other session's log says its file was
// touched and what was put back.
func TestIntrusionIntoANeighbourIsPutBack(t *testing.T) {
	if harness.LSM() {
		t.Skip("bpf-lsm refuses the chmod before its effect: nothing to put back")
	}
	w := harness.NewWorld(t)
	w.File(w.W("a", "x"), "a v1\n")
	w.File(w.W("b", "y"), "b v1\n")
	tbl := lease.NewTable()
	b := startLeased(t, w, leasedSpec{leases: tbl, intents: []string{"MUTATES FILE:" + w.W("b") + "/**"},
		script: "echo 'b v2' > b/y; echo up; read go || :"})
	b.line("up")
	a := startLeased(t, w, leasedSpec{leases: tbl, intents: []string{"MUTATES FILE:" + w.W("a") + "/**", "PROVIDES PROC:" + harness.Real(t, "/usr/bin/chmod")},
		script: "echo 'a v2' > a/x; chmod 600 b/y; echo up; read go || :"})
	res, err := a.end()
	if err != nil || !res.Killed {
		t.Fatalf("a: %v %+v, want killed for its chmod in b/", err, res)
	}
	if got := w.Content(w.W("a", "x")); got != "a v1\n" {
		t.Errorf("a/x = %q, want it restored", got)
	}
	lg := a.log()
	op := rollbackOf(lg, w.W("b", "y"))
	if op == nil || !op.Reclaimed || !op.OK || !strings.Contains(op.Why, "session "+b.id) {
		t.Fatalf("a's rollback of b/y: %+v, want it put back, naming session %s\n%+v\nviolations %+v", op, b.id, lg.Rollback, lg.Violations)
	}
	if st, err := os.Stat(w.W("b", "y")); err != nil || st.Mode().Perm() != 0o644 || w.Content(w.W("b", "y")) != "b v2\n" {
		t.Errorf("b/y: %v %v %q: want b's work kept and the chmod undone", st.Mode(), err, w.Content(w.W("b", "y")))
	}
	if res, err := b.end(); err != nil || res.Killed {
		t.Fatalf("b: %v %+v", err, res)
	}
	assertToldOf(t, b.log(), a.id, w.W("b", "y"))
}

// rollbackOf is lg's rollback step for path, nil when none.
func rollbackOf(lg *vlog.Log, path string) *vlog.RollbackOp {
	for i := range lg.Rollback {
		if lg.Rollback[i].Path == path {
			return &lg.Rollback[i]
		}
	}
	return nil
}

// assertToldOf checks the holder's log says session intruder changed
// path and its rollback put it back, and that its headline says so.
func assertToldOf(t *testing.T, holder *vlog.Log, intruder, path string) {
	t.Helper()
	for _, x := range holder.Intrusions {
		if x.Session == intruder && x.Path == path && x.OK && x.PutBack != "" {
			if _, summary := holder.Headline(); !strings.Contains(summary, "another session changed") {
				t.Errorf("the holder's headline %q does not say its file was touched", summary)
			}
			return
		}
	}
	t.Errorf("the holder's log does not say session %s changed %s: %+v", intruder, path, holder.Intrusions)
}
