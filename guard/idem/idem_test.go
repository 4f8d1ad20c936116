package idem

import (
	"os"
	"path/filepath"
	"testing"
)

func TestStoreSurvivesRestartAndTornLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "idem.jsonl")
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put("k1", "issue_refund", []byte(`{"refund_id":"r1"}`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A crash mid-append leaves a torn line.
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"key":"k2","tool":"x","res`)
	f.Close()
	s, err = Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, ok := s.Get("k1")
	if !ok || string(e.Result) != `{"refund_id":"r1"}` {
		t.Fatalf("k1 after restart: %v %s", ok, e.Result)
	}
	if _, ok := s.Get("k2"); ok || s.Len() != 1 {
		t.Fatal("a torn entry was kept")
	}
	if err := s.Put("k3", "x", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, _ := Open(p)
	defer s2.Close()
	if s2.Len() != 2 {
		t.Fatalf("after append past a torn line: %d keys", s2.Len())
	}
}
