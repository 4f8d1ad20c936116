package hashchain

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

type rec struct {
	Seq  uint64 `json:"seq"`
	Prev string `json:"prev"`
	What string `json:"what"`
}

func appendN(t *testing.T, w *Writer, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := w.Append(func(h Head) ([]byte, error) {
			return json.Marshal(rec{Seq: h.Next(), Prev: h.Hash, What: "x"})
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestChainAppendVerifyAndTamper(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path, WithoutSync())
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, w, 5)
	w.Close()
	head, err := VerifyFile(path, nil)
	if err != nil || head.Seq != 5 {
		t.Fatalf("verify: head %+v err %v", head, err)
	}
	data, _ := os.ReadFile(path)
	for i := range data {
		if data[i] == '\n' {
			continue
		}
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x01
		os.WriteFile(path, bad, 0o600)
		if _, err := VerifyFile(path, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrBroken) {
			// A flip inside "what" changes the line hash, which the next
			// line's prev no longer matches; in the last line only the
			// content changes, so a caller's check (signatures) is what
			// catches it. Here: everything but the last line must break.
			lastStart := len(data) - 1
			for lastStart > 0 && data[lastStart-1] != '\n' {
				lastStart--
			}
			if i < lastStart {
				t.Fatalf("flip at byte %d not detected", i)
			}
		}
	}
}

func TestAppendRefusesAForkedLine(t *testing.T) {
	w, err := Open(filepath.Join(t.TempDir(), "c.jsonl"), WithoutSync())
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, w, 2)
	_, err = w.Append(func(h Head) ([]byte, error) {
		return json.Marshal(rec{Seq: h.Next(), Prev: "", What: "fork"})
	})
	if !errors.Is(err, ErrNotLinked) {
		t.Fatalf("err = %v, want ErrNotLinked", err)
	}
	if w.Head().Seq != 2 {
		t.Fatalf("head moved to %d", w.Head().Seq)
	}
}

func TestOpenCutsATornTailAndContinues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.jsonl")
	w, _ := Open(path, WithoutSync())
	appendN(t, w, 3)
	w.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":4,"prev":"ab`)
	f.Close()
	if _, err := VerifyFile(path, nil); !errors.Is(err, ErrBroken) {
		t.Fatalf("torn tail verified: %v", err)
	}
	w, err := Open(path, WithoutSync())
	if err != nil {
		t.Fatal(err)
	}
	if w.Head().Seq != 3 {
		t.Fatalf("head after reopen = %d, want 3", w.Head().Seq)
	}
	appendN(t, w, 1)
	w.Close()
	if h, err := VerifyFile(path, nil); err != nil || h.Seq != 4 {
		t.Fatalf("after repair: %+v %v", h, err)
	}
}

func TestOpenRefusesABrokenChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.jsonl")
	os.WriteFile(path, []byte(`{"seq":1,"prev":""}`+"\n"+`{"seq":3,"prev":""}`+"\n"), 0o600)
	if _, err := Open(path); !errors.Is(err, ErrBroken) {
		t.Fatalf("Open on a broken chain: %v", err)
	}
}
