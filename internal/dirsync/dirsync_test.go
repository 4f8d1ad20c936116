package dirsync

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
)

func TestSync(t *testing.T) {
	if err := Sync(t.TempDir()); err != nil {
		t.Fatalf("Sync of a directory: %v", err)
	}
	if err := Sync(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Sync of a missing directory: %v, want ErrNotExist", err)
	}
}
