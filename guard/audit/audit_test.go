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
	r.SetArgs(map[string]any{"customer_id": "c_42"}, true, l.Hasher())
	// Not digits: "123" once turned up inside a hex digest by chance.
	r.SetOutput([]byte(`{"ssn":"ssn-plain-zq"}`))
	if err := l.Append(r); err != nil {
		t.Fatal(err)
	}
	r2 := &Record{Event: "decision", Tool: "get_account"}
	r2.SetArgs(map[string]any{"customer_id": "c_42"}, false, l.Hasher())
	l.Append(r2)
	l.Close()
	data, _ := os.ReadFile(p)
	first := strings.SplitN(string(data), "\n", 2)[0]
	if strings.Contains(first, "c_42") || strings.Contains(first, "ssn-plain-zq") || !strings.Contains(first, l.Hasher().Digest("c_42")) {
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

// TestConfidentialDigestIsKeyed: a confidential argument is never stored as
// its plain SHA-256 (a guessed customer id would be confirmed by hashing
// it); the keyed digest stays stable across reopenings of one deployment
// and differs in another.
func TestConfidentialDigestIsKeyed(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	l, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	r := &Record{Event: EventDecision, Tool: "get_account"}
	r.SetArgs(map[string]any{"customer_id": "c_42"}, true, l.Hasher())
	if err := l.Append(r); err != nil {
		t.Fatal(err)
	}
	l.Close()
	data, _ := os.ReadFile(p)
	if strings.Contains(string(data), HashValue("c_42")) {
		t.Fatalf("confidential record holds the plain SHA-256 of its argument: %s", data)
	}
	if !strings.Contains(string(data), DigestPrefix) {
		t.Fatalf("no keyed digest: %s", data)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	l2, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if l2.Hasher().Digest("c_42") != r.ArgsHMAC["customer_id"] {
		t.Fatal("the digest changed across a reopening of the same deployment")
	}
	other, err := Open(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.Hasher().Digest("c_42") == r.ArgsHMAC["customer_id"] {
		t.Fatal("two deployments share digests: the key is not per deployment")
	}
	os.Chmod(filepath.Join(dir, KeyFile), 0o644)
	if _, err := Open(p); !errors.Is(err, ErrKey) {
		t.Fatalf("a world-readable key was used: %v", err)
	}
}
