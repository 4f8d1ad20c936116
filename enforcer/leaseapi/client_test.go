//go:build linux

package leaseapi

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// Nothing at the socket: ErrNoServer, naming the socket and klockd.
func TestClientNoServer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	_, err := Dial(sock).List(context.Background(), "")
	if !errors.Is(err, ErrNoServer) {
		t.Fatalf("%v, want ErrNoServer", err)
	}
	t.Log(err)
}

// The Go client over the socket: DIE is an answer, refusals are typed
// errors matching their sentinels, the event stream reads events.
func TestClient(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	cl := Dial(ts.socket)
	defer cl.Close()
	stream, err := cl.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	r, err := cl.Acquire(ctx, ManifestRequest{AgentID: "a", SessionID: "s1", Intents: []string{"MUTATES FILE:/c/**"}, Timestamp: time.Now().Add(-time.Second).UnixMilli()})
	if err != nil || r.Outcome != "GRANTED" || len(r.Leases) != 1 {
		t.Fatalf("acquire: %+v %v", r, err)
	}
	if ev, err := stream.Next(); err != nil || ev.Type != "LeaseGranted" || ev.Lease.LeaseID != r.Leases[0].LeaseID {
		t.Fatalf("event %+v %v", ev, err)
	}
	d, err := cl.Acquire(ctx, ManifestRequest{AgentID: "b", SessionID: "s2", Intents: []string{"MUTATES FILE:/c/x"}})
	if err != nil || d.Outcome != "DIE" || d.ErrorClass != ClassDie || d.Conflicts[0].Held.LeaseID != r.Leases[0].LeaseID {
		t.Fatalf("die: %+v %v", d, err)
	}
	if _, err := cl.Acquire(ctx, ManifestRequest{AgentID: "b", SessionID: "s2", Intents: []string{"OWNS FILE:/c/x"}}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("bad intent: %v", err)
	}
	hb, err := cl.Heartbeat(ctx, Targets{AgentID: "a", SessionID: "s1"})
	if err != nil || !hb.Results[0].OK {
		t.Fatalf("heartbeat: %+v %v", hb, err)
	}
	st, err := cl.State(ctx, "FILE:/c/deep/file")
	if err != nil || len(st.Leases) != 1 {
		t.Fatalf("state: %+v %v", st, err)
	}
	rc, err := cl.Reconcile(ctx, Targets{LeaseIDs: []string{r.Leases[0].LeaseID}})
	if err != nil || len(rc.Active) != 1 || len(rc.Gone) != 0 || len(rc.Unlisted) != 0 {
		t.Fatalf("reconcile: %+v %v", rc, err)
	}
	if c, err := cl.Contention(ctx); err != nil || len(c.Recent) != 1 || c.Recent[0].Requester.SessionID != "s2" {
		t.Fatalf("contention: %+v %v", c, err)
	}
	if n, err := cl.Revoke(ctx, "s1"); err != nil || n != 1 {
		t.Fatalf("revoke: %d %v", n, err)
	}
	if _, err := cl.Revoke(ctx, "s1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoke again: %v", err)
	}
	if _, err := cl.Release(ctx, Targets{LeaseIDs: []string{"l-nothing"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release unknown: %v", err)
	}
	if ls, err := cl.List(ctx, ""); err != nil || len(ls) != 0 {
		t.Fatalf("list: %v %v", ls, err)
	}
	for {
		ev, err := stream.Next()
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if ev.Type == "LeaseFreed" {
			if ev.Lease.State != "Revoked" && ev.Lease.State != "Released" {
				t.Fatalf("freed %+v", ev.Lease)
			}
			break
		}
	}
	stream.Close()
	if _, err := stream.Next(); err == nil {
		t.Fatalf("closed stream: %v", err)
	}
}
