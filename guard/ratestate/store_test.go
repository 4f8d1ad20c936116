package ratestate

import (
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/policy"
)

func refundAgent(t *testing.T) *policy.Manifest {
	t.Helper()
	_, f, _, _ := runtime.Caller(0)
	m, err := policy.Load(filepath.Join(filepath.Dir(f), "..", "..", "examples", "manifests", "refund-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.DeclaredTools {
		if m.DeclaredTools[i].Name == "get_account" {
			m.DeclaredTools[i].RateLimits = policy.RateLimits{PerDay: 1}
		}
	}
	return m
}

// TestPerDaySurvivesRestart: a per_day: 1 tool stays
// used after the gateway restarts, and governance stays as set.
func TestPerDaySurvivesRestart(t *testing.T) {
	m := refundAgent(t)
	db := filepath.Join(t.TempDir(), "limits.db")
	call := func() *check.Call {
		return &check.Call{Tool: "get_account", Args: map[string]any{"customer_id": "c_42"},
			Context: map[string]any{"task": map[string]any{"customer_id": "c_42"}}, RunID: "r1"}
	}
	open := func() (*check.Pipeline, *Store) {
		s, err := Open(db)
		if err != nil {
			t.Fatal(err)
		}
		p, err := check.New(m, check.WithState(s))
		if err != nil {
			t.Fatal(err)
		}
		return p, s
	}
	p, s := open()
	if d := p.Decide(call()); d.Verdict != check.Allow {
		t.Fatalf("first call: %v %v", d.Verdict, d.Err)
	}
	if err := p.Disable("send_email", "INC-1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Limit("issue_refund", policy.RateLimits{PerRun: 1}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	p, s = open()
	defer s.Close()
	if d := p.Decide(call()); d.Verdict != check.Deny || d.Err.Reason != "rate_per_day" {
		t.Fatalf("after a restart: %v, want the per_day limit still used", d.Verdict)
	}
	if p.Declared("send_email") {
		t.Error("send_email enabled again by a restart")
	}
	for _, st := range p.Status() {
		if st.Name == "issue_refund" && st.Limits.PerRun != 1 {
			t.Errorf("issue_refund per_run after a restart: %d, want governance's 1", st.Limits.PerRun)
		}
	}
}

// TestSyncFlushesTheLog: Sync flushes the write-ahead log the database
// writes its commits to (none yet: nothing to flush), and follows a log
// another connection made after this one's was closed.
func TestSyncFlushesTheLog(t *testing.T) {
	db := filepath.Join(t.TempDir(), "limits.db")
	s, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync before any write: %v", err)
	}
	if err := s.SaveUse("t", check.Use{RunID: "r", Calls: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	same := func(s *Store) bool {
		var a, b unix.Stat_t
		return s.wal != nil && unix.Fstat(int(s.wal.Fd()), &a) == nil && unix.Stat(db+"-wal", &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev
	}
	if !same(s) {
		t.Fatal("Sync did not flush the database's current log")
	}
	s.Close()
	s2, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.SaveUse("t", check.Use{RunID: "r", Calls: 2}); err != nil {
		t.Fatal(err)
	}
	if err := s2.Sync(); err != nil || !same(s2) {
		t.Fatalf("Sync of a reopened database: %v, on its log: %v", err, same(s2))
	}
	got, err := s2.Load()
	if err != nil || got["t"].Runs["r"] != 2 {
		t.Fatalf("Load: %+v %v", got, err)
	}
}

// BenchmarkSaveUse: one allowed call's counters saved (a run's count and
// one bucket), the write a tool call makes before its dispatch; the log's
// flush is Sync's, beside the audit, and not in it.
func BenchmarkSaveUse(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "limits.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	u := check.Use{RunID: "run-1", Buckets: map[string]check.BucketState{"per_minute": {Tokens: 5}}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		u.Calls = i
		if err := s.SaveUse("echo", u); err != nil {
			b.Fatal(err)
		}
	}
}
