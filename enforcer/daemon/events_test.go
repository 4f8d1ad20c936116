//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// collector gathers the records of a klock events stream, each as the
// JSON the client received and validated against the published schema.
type collector struct {
	t    testing.TB
	mu   sync.Mutex
	recs []eventlog.Record
	// gate, when set, is waited on before each record is taken: a reader
	// that stopped reading.
	gate chan struct{}
	// ended is closed when session's end record arrives.
	session string
	ended   chan struct{}
}

func newCollector(t testing.TB) *collector { return &collector{t: t, ended: make(chan struct{})} }

func (c *collector) take(r eventlog.Record) error {
	if c.gate != nil {
		<-c.gate
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := eventlog.Validate(line); err != nil {
		c.t.Errorf("%v\n%s", err, line)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r)
	if r.Kind == eventlog.KindSessionEnd && c.session != "" && r.Session == c.session {
		close(c.ended)
		c.session = ""
	}
	return nil
}

func (c *collector) wait(id string) {
	c.mu.Lock()
	for _, r := range c.recs {
		if r.Kind == eventlog.KindSessionEnd && r.Session == id {
			c.mu.Unlock()
			return
		}
	}
	c.session = id
	c.mu.Unlock()
	select {
	case <-c.ended:
	case <-time.After(time.Minute):
		c.t.Fatalf("no session.end record for %s", id)
	}
}

// follow streams s's records to c until the test ends.
func follow(t testing.TB, s *Server, c *collector, req EventsRequest) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cl, err := Dial(s.Addr())
		if err != nil {
			done <- err
			return
		}
		done <- cl.Events(ctx, req, c.take)
	}()
	t.Cleanup(func() {
		cancel()
		if c.gate != nil {
			close(c.gate)
		}
		if err := <-done; err != nil {
			t.Errorf("events: %v", err)
		}
	})
}

// TestEventsOfStrictViolation: klock events --follow receives a strict
// session's start, violation, kill, rollback and end records, each valid
// against the schema; a reader of another session's id gets none of them.
func TestEventsOfStrictViolation(t *testing.T) {
	s := startServer(t, Config{})
	// The agent makes a file it may make, then one it may not: the kill
	// rolls the first back.
	wd, mpath, data := manifest(t, policy.ModeStrict, "PROVIDES FILE:${workdir}/made")
	all, other := newCollector(t), newCollector(t)
	follow(t, s, all, EventsRequest{Follow: true, Since: time.Now()})
	follow(t, s, other, EventsRequest{Follow: true, Session: "no-such-session"})
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := cl.Run(context.Background(), &Run{RunRequest: RunRequest{
		Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID,
		Argv: []string{"/bin/sh", "-c", "echo x > " + wd + "/made; echo x > " + wd + "/undeclared; sleep 5"}, Env: []string{"PATH=/usr/bin:/bin"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Killed {
		t.Fatalf("not killed: %+v", res)
	}
	all.wait(res.ID)
	all.mu.Lock()
	defer all.mu.Unlock()
	kinds := map[eventlog.Kind]eventlog.Record{}
	for _, r := range all.recs {
		if r.Session != res.ID && r.Kind != eventlog.KindLeaseGrant {
			continue
		}
		if _, ok := kinds[r.Kind]; !ok {
			kinds[r.Kind] = r
		}
		t.Log(eventlog.Text(r))
	}
	undeclared := filepath.Join(wd, "undeclared")
	if v, ok := kinds[eventlog.KindViolation]; !ok || v.Op.Object != "FILE:"+undeclared || v.Violation.Action != "violation-kill" {
		t.Errorf("violation record %+v", v)
	}
	if k, ok := kinds[eventlog.KindKill]; !ok || k.Reason == "" || k.Owner != "uid:0" || k.Source != "klockd" {
		t.Errorf("kill record %+v", k)
	}
	if rb, ok := kinds[eventlog.KindRollback]; !ok || rb.Rollback.Path != filepath.Join(wd, "made") || rb.Rollback.Action != "removed" || !rb.Rollback.OK {
		t.Errorf("rollback record %+v", rb.Rollback)
	}
	if e, ok := kinds[eventlog.KindSessionEnd]; !ok || e.End.Verdict != "violation" || !e.End.Killed || e.Mode != "strict" {
		t.Errorf("end record %+v", e.End)
	}
	if _, ok := kinds[eventlog.KindSessionStart]; !ok {
		t.Error("no session.start record")
	}
	other.mu.Lock()
	defer other.mu.Unlock()
	if len(other.recs) != 0 {
		t.Errorf("a reader of another session got %d records", len(other.recs))
	}
}

// TestEventsSinceReplays: a reader that comes after the session gets its
// records from the backlog (--since), and without --follow the stream
// ends there.
func TestEventsSinceReplays(t *testing.T) {
	s := startServer(t, Config{})
	_, mpath, data := manifest(t, policy.ModePermissive)
	before := time.Now()
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl.Run(context.Background(), &Run{RunRequest: RunRequest{
		Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID, AllowDegraded: true,
		Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	read := func(req EventsRequest) []eventlog.Record {
		c := newCollector(t)
		cl, err := Dial(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cl.Events(ctx, req, c.take); err != nil || ctx.Err() != nil {
			t.Fatalf("events: %v %v (a stream without --follow must end)", err, ctx.Err())
		}
		return c.recs
	}
	got := read(EventsRequest{Since: before, Session: res.ID})
	var kinds []string
	for _, r := range got {
		kinds = append(kinds, string(r.Kind))
	}
	if k := strings.Join(kinds, ","); k != "lease.grant,session.start,session.end" || got[2].End.Verdict != "clean" {
		t.Errorf("replay %s", k)
	}
	if got := read(EventsRequest{Since: time.Now().Add(time.Hour)}); len(got) != 0 {
		t.Errorf("records from the future: %+v", got)
	}
}

// manyFiles is an agent that makes n files in wd: n observed triples.
func manyFiles(wd string, n int) []string {
	return []string{"/bin/sh", "-c", "cd " + wd + " && i=0; while [ $i -lt " + strconv.Itoa(n) + " ]; do : > f$i; i=$((i+1)); done"}
}

// TestStalledReaderIsToldItsLoss: a reader of every observed triple that
// stops reading does not stop the session; when it reads again it gets
// a lost record counting what it missed, then the records after the gap.
func TestStalledReaderIsToldItsLoss(t *testing.T) {
	s := startServer(t, Config{})
	wd, mpath, data := manifest(t, policy.ModePermissive, "PROVIDES FILE:${workdir}/**")
	c := newCollector(t)
	c.gate = make(chan struct{})
	follow(t, s, c, EventsRequest{Follow: true, All: true})
	time.Sleep(100 * time.Millisecond) // let the stream subscribe: the test needs observed records made
	gate := c.gate
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl.Run(context.Background(), &Run{RunRequest: RunRequest{
		Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID, AllowDegraded: true,
		Argv: manyFiles(wd, 6000), Env: []string{"PATH=/usr/bin:/bin"}}})
	if err != nil || res.Killed || res.Exit.Code != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	c.gate = nil
	close(gate) // read again
	// The records published while the ring was full are lost, the
	// session's end among them; a session run now is read whole, after
	// the lost record.
	res2, err := cl.Run(context.Background(), &Run{RunRequest: RunRequest{
		Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID, AllowDegraded: true,
		Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	c.wait(res2.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	var lost uint64
	observed, lostAt, endAt := 0, -1, -1
	for i, r := range c.recs {
		switch {
		case r.Kind == eventlog.KindLost:
			lost += r.Lost
			lostAt = i
		case r.Kind == eventlog.KindObserved && r.Session == res.ID:
			observed++
		case r.Kind == eventlog.KindSessionEnd && r.Session == res2.ID:
			endAt = i
		}
	}
	if lost == 0 {
		t.Fatalf("a stalled reader lost nothing (%d records, %d observed)", len(c.recs), observed)
	}
	t.Logf("%d records read, %d observed, %d lost", len(c.recs), observed, lost)
	if observed+int(lost) < 6000 {
		t.Errorf("observed %d + lost %d < the 6000 files made", observed, lost)
	}
	if endAt < lostAt {
		t.Errorf("the next session's end (record %d) came before the lost record (%d)", endAt, lostAt)
	}
}

// TestPublishLabelsThePeer: a gateway's records reach klock events
// labelled with the peer's uid, whatever it claims; a record of a kind
// only klockd makes (a violation) is not taken from a peer.
func TestPublishLabelsThePeer(t *testing.T) {
	s := startServer(t, Config{})
	c := newCollector(t)
	follow(t, s, c, EventsRequest{Follow: true, Since: time.Now()})
	pub := NewPublisher(s.Addr())
	pub.Publish(eventlog.Record{Kind: eventlog.KindViolation, Session: "forged", Source: "klockd",
		Op: &eventlog.Op{Predicate: "MUTATES", Object: "FILE:/etc/passwd"}, Violation: &eventlog.Violation{Action: "violation-kill", Error: "x"}})
	pub.Publish(eventlog.Record{Kind: eventlog.KindToolDenied, Session: "run1", Source: "klockd", Owner: "uid:4242",
		Tool: &eventlog.Tool{Name: "drop_database", Reason: "undeclared"}})
	pub.Publish(eventlog.Record{Kind: eventlog.KindSessionEnd, Session: "run1", End: &eventlog.End{Verdict: "clean", Exit: "0"}})
	pub.Close()
	if pub.Dropped() != 0 {
		t.Fatalf("dropped %d", pub.Dropped())
	}
	// klock events sees the tool record; the end record a peer sent must
	// not be there, so wait on a real session's end.
	_, mpath, data := manifest(t, policy.ModePermissive)
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl.Run(context.Background(), &Run{RunRequest: RunRequest{Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID,
		AllowDegraded: true, Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	c.wait(res.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	tools := 0
	for _, r := range c.recs {
		switch {
		case r.Session == "forged" || r.Session == "run1" && r.Kind != eventlog.KindToolDenied:
			t.Errorf("a peer's %s record was taken", r.Kind)
		case r.Kind == eventlog.KindToolDenied:
			tools++
			if r.Source != "peer uid:0" || r.Owner != "uid:0" {
				t.Errorf("peer record labelled source %q owner %q", r.Source, r.Owner)
			}
		}
	}
	if tools != 1 {
		t.Errorf("%d tool.denied records, want 1", tools)
	}
}

// TestEventsOfAMemberAreItsOwn: a klock-group member that is not root is
// shown its own records only: not root's session, nor its leases.
func TestEventsOfAMemberAreItsOwn(t *testing.T) {
	s := startServer(t, Config{Group: "nogroup", SocketMode: 0o666})
	if !s.hasGroup || s.gid != 65534 {
		testutil.Unavailable(t, "this host has no group nogroup with gid 65534")
	}
	_, mpath, data := manifest(t, policy.ModePermissive)
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Run(context.Background(), &Run{RunRequest: RunRequest{Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID,
		AllowDegraded: true, Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}}}); err != nil {
		t.Fatal(err)
	}
	rd := s.Events().Subscribe(eventlog.Filter{Since: time.Now().Add(-time.Minute)}, false, 0)
	if _, err := rd.Next(context.Background()); err != nil {
		t.Fatal("root's session left no records to hide")
	}
	member := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 12345, Groups: []uint32{65534}}}
	r := helper(t, s.Addr(), "events", member)
	if !r.OK {
		t.Fatalf("member's events: %+v", r)
	}
	for _, seen := range strings.Split(r.Message, ",") {
		if !strings.HasSuffix(seen, "/uid:65534") {
			t.Errorf("the member was shown %s", seen)
		}
	}
	if !strings.Contains(r.Message, "tool.denied/uid:65534") {
		t.Errorf("the member was not shown its own record: %s", r.Message)
	}
}
