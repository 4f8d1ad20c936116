package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The ring really performs the open: a file's fd comes back, a missing
// one's ENOENT does.
func TestIOURingOpenat(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := IOURingOpenat(p, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if n, err := unix.Read(fd, b[:]); n != 1 || err != nil || b[0] != 'x' {
		t.Fatalf("read through the ring's fd: %d %v %q", n, err, b)
	}
	unix.Close(fd)
	if _, err := IOURingOpenat(p+".missing", unix.O_RDONLY); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("missing file: %v, want ENOENT", err)
	}
}
