package testutil

import (
	"bytes"
	"os"
	"sync"
	"testing"
)

// OpenDir makes a directory under /tmp that every uid can traverse
// (t.TempDir's parents are 0700: an agent running as another uid could not
// reach its workdir), owned by owner (-1: root), removed when the test
// ends.
func OpenDir(t testing.TB, owner int) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "klock-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if owner >= 0 {
		if err := os.Chown(d, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// SyncBuffer is a bytes.Buffer one goroutine (a process's output, a
// logger) writes while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
