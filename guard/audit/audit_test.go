package audit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/hashchain"
)

func TestConfidentialAndTamper(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a", "audit.jsonl")
	l, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	r := &Record{Event: "decision", Tool: "get_account", Verdict: "allow"}
	r.SetArgs(map[string]any{"customer_id": "c_42"}, true)
	r.SetOutput([]byte(`{"ssn":"123"}`))
	if err := l.Append(r); err != nil {
		t.Fatal(err)
	}
	r2 := &Record{Event: "decision", Tool: "get_account"}
	r2.SetArgs(map[string]any{"customer_id": "c_42"}, false)
	l.Append(r2)
	l.Close()
	data, _ := os.ReadFile(p)
	first := strings.SplitN(string(data), "\n", 2)[0]
	if strings.Contains(first, "c_42") || strings.Contains(first, "123") || !strings.Contains(first, HashValue("c_42")) {
		t.Fatalf("confidential record leaks plaintext: %s", first)
	}
	if n, err := Verify(p); err != nil || n != 2 {
		t.Fatalf("verify: %d %v", n, err)
	}
	os.WriteFile(p, []byte(strings.Replace(string(data), "get_account", "get_acc0unt", 1)), 0o600)
	if _, err := Open(p); !errors.Is(err, hashchain.ErrBroken) {
		t.Fatalf("a tampered log opened: %v", err)
	}
}

func TestUnwritableRefusesToOpen(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	if _, err := Open(filepath.Join(f, "audit.jsonl")); !errors.Is(err, ErrUnwritable) {
		t.Fatalf("open under a file: %v", err)
	}
}

// A result record is in the file when Append returns (the fsync may come
// later), and the chain stays whole across dispatch/result pairs.
func TestResultRecordWrittenOnReturn(t *testing.T) {
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := l.Append(&Record{Event: EventDispatch, CallID: "c", Tool: "t"}); err != nil {
			t.Fatal(err)
		}
		if err := l.Append(&Record{Event: EventResult, CallID: "c", Tool: "t", Result: "ok"}); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(p)
		if n := strings.Count(string(data), `"event":"result"`); n != i+1 {
			t.Fatalf("after result %d the file holds %d result records", i+1, n)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := Verify(p); err != nil || n != 6 {
		t.Fatalf("verify: %d %v", n, err)
	}
}
