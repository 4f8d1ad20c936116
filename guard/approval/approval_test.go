package approval

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDecisionFromAnotherStoreAndTimeout(t *testing.T) {
	dir := t.TempDir()
	gw, err := Open(dir, WithPoll(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r, err := gw.Submit(Request{Agent: "a", Tool: "send_email", Fingerprint: "f1", Why: "IRREVERSIBLE-WRITE"}, time.Minute)
	if err != nil || r.State != Pending || !validID(r.ID) {
		t.Fatalf("submit: %+v %v", r, err)
	}
	// A retry of the same call waits on the same request.
	if again, _ := gw.Submit(Request{Fingerprint: "f1"}, time.Minute); again.ID != r.ID {
		t.Fatalf("retry filed a second request %s", again.ID)
	}
	// The operator's process opens the same directory.
	op, _ := Open(dir)
	go func() { time.Sleep(20 * time.Millisecond); op.Decide(r.ID, true, "alice", "ok") }()
	got, err := gw.Wait(context.Background(), r.ID, 5*time.Second)
	if err != nil || got.State != Approved || got.DecidedBy != "alice" {
		t.Fatalf("wait: %+v %v", got, err)
	}
	if _, err := op.Decide(r.ID, false, "bob", ""); !errors.Is(err, ErrDecided) {
		t.Fatalf("second decision: %v", err)
	}
	// A deadline that passes denies.
	now := time.Now()
	clk := func() time.Time { return now }
	s, _ := Open(dir, WithClock(clk))
	r2, _ := s.Submit(Request{Tool: "x", Fingerprint: "f2"}, time.Second)
	now = now.Add(2 * time.Second)
	got, _ = s.Get(r2.ID)
	if got.State != Expired {
		t.Fatalf("after the deadline: %s", got.State)
	}
	if _, err := s.Decide(r2.ID, true, "late", ""); !errors.Is(err, ErrDecided) {
		t.Fatalf("approving an expired request: %v", err)
	}
	if _, err := s.Get("ap_nothere0000"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := s.Get("../../etc/passwd"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("path id: %v", err)
	}
}
