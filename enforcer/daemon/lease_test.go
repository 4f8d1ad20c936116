//go:build linux

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLeaseConflictThroughDaemon: a klockd session refused for a lease
// another session holds gets the embedded path's error back: errors.Is
// ErrLeaseConflict, errors.As a *session.LeaseConflictError naming the
// holder; with LeaseWait on the wire it waits, its progress reaches the
// client's logger, and it runs once the lease is released.
func TestLeaseConflictThroughDaemon(t *testing.T) {
	tbl := lease.NewTable()
	s := startServer(t, Config{Leases: tbl})
	wd, mpath, data := manifest(t, policy.ModePermissive, "MUTATES FILE:${workdir}/**")
	m, err := policy.Parse(mpath, data)
	if err != nil {
		t.Fatal(err)
	}
	in, err := policy.ParseIntent("MUTATES FILE:" + wd + "/src/**")
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := lease.FromIntent(in)
	other := lease.Holder{Tenant: "uid:1000", Agent: "coder", Session: "s-other"}
	if d, err := tbl.Acquire(context.Background(), lease.Request{Holder: other, Claims: []lease.Claim{c}}); err != nil || d.Outcome != lease.Granted {
		t.Fatal(err, d)
	}
	opts := session.Options{Manifest: m, ManifestPath: mpath, ManifestData: data, User: agentUser(), AllowDegraded: true,
		Command: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: outFile(t), Stderr: outFile(t)}
	_, used, err := RunViaDaemon(context.Background(), s.Addr(), opts)
	var lc *session.LeaseConflictError
	if !used || !errors.Is(err, session.ErrLeaseConflict) || !errors.As(err, &lc) {
		t.Fatalf("used %v err %v, want ErrLeaseConflict", used, err)
	}
	mine := map[string]bool{}
	for _, c := range lc.Decision.Conflicts {
		if c.Held.Holder != other || c.Held.Object != "FILE:"+wd+"/src/**" || c.Held.Predicate != policy.Mutates {
			t.Errorf("a conflict from klockd names %+v", c.Held)
		}
		mine[c.Claim.Intent] = true
	}
	// Its own MUTATES, and the CONSUMES (a reader of what another writes).
	if len(mine) != 2 || !mine["MUTATES FILE:"+wd+"/**"] || !mine["CONSUMES FILE:"+wd+"/**"] {
		t.Fatalf("the conflicts from klockd: %+v", lc.Decision)
	}
	if !strings.Contains(err.Error(), "session s-other (agent coder) holds MUTATES FILE:"+wd+"/src/**") {
		t.Fatalf("message: %v", err)
	}

	var progress lockedBuffer
	opts.Logger = slog.New(slog.NewTextHandler(&progress, nil))
	opts.LeaseWait = 20 * time.Second
	go func() {
		for !strings.Contains(progress.String(), "waiting for session s-other") {
			time.Sleep(10 * time.Millisecond)
		}
		tbl.Release(context.Background(), other)
	}()
	res, used, err := RunViaDaemon(context.Background(), s.Addr(), opts)
	if !used || err != nil || res.Killed || res.Exit.ExitCode() != 0 {
		t.Fatalf("with --wait: %v %+v\n%s", err, res, progress.String())
	}
	if res.Log == nil || res.Log.LeaseWait == nil || res.Log.LeaseWait.Behind[0].Session != "s-other" {
		t.Fatalf("the log does not say it waited behind s-other: %+v", res.Log)
	}
	for _, h := range res.Log.Leases {
		if h.Lease == "MUTATES FILE:"+wd+"/**" {
			return
		}
	}
	t.Fatalf("the log does not list its lease: %+v", res.Log.Leases)
}

// TestLeaseConflictOnTheWire: the decision crosses the wire and comes
// back as the session's error, message and all.
func TestLeaseConflictOnTheWire(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	in := &session.LeaseConflictError{Waited: 1500 * time.Millisecond, Wait: time.Second, Decision: lease.Decision{Outcome: lease.Wait, Conflicts: []lease.Conflict{{
		Claim:   lease.Claim{Predicate: policy.Mutates, Intent: "MUTATES FILE:/w/**"},
		Held:    lease.Lease{ID: "l-1", Holder: lease.Holder{Tenant: "uid:0", Agent: "a", Session: "s"}, Predicate: policy.Provides, Object: "FILE:/w/x", AcquiredAt: at, ExpiresAt: at.Add(time.Minute)},
		Outcome: lease.Wait}}}}
	e := wireError(fmt.Errorf("wrapped: %w", in))
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var back Error
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	var out *session.LeaseConflictError
	if back.Class != ClassLeaseConflict || !errors.Is(&back, session.ErrLeaseConflict) || !errors.As(error(&back), &out) {
		t.Fatalf("back: %+v", back)
	}
	if out.Error() != in.Error() || out.Decision.Conflicts[0].Held.Resource.Path.Path != "/w/x" || out.Decision.Conflicts[0].Claim.Resource.Path.Path != "/w" {
		t.Fatalf("rebuilt:\n%s\nwant\n%s\n%+v", out.Error(), in.Error(), out.Decision)
	}
}
