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

// TestIOURingRenameatAndAsync: a rename through the ring, and an open
// forced to its io-wq workers, have their effect (the stress rows of the
// walls' tests rely on both reaching the kernel as submitted).
func TestIOURingRenameatAndAsync(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(a, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := IOURingRenameat(a, b, IOSQEAsync); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			t.Skipf("io_uring renameat unavailable here: %v", err)
		}
		t.Fatal(err)
	}
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("renamed file: %v", err)
	}
	fd, err := IOURingOpenatFlags(b, unix.O_WRONLY|unix.O_TRUNC, IOSQEAsync)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if st, _ := os.Stat(b); st == nil || st.Size() != 0 {
		t.Fatalf("O_TRUNC through io-wq: %v", st)
	}
}
