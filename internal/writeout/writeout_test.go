package writeout

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Range leaves the file's contents as written (it only changes when they
// reach the disk), over a range that is not a multiple of Chunk.
func TestRangeKeepsContents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := bytes.Repeat([]byte("klock"), (3*Chunk+100)/5)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := Range(f, 0, int64(len(data))); err != nil {
		t.Fatalf("Range: %v", err)
	}
	if err := Range(f, Chunk/2, int64(len(data))+Chunk); err != nil {
		t.Fatalf("Range past the end: %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("contents changed (%d bytes, %v)", len(got), err)
	}
}

// What cannot be written out is an error naming the file, never a
// silent success a caller could take for durability.
func TestRangeFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var pe *fs.PathError
	if err := Range(w, 0, 10); !errors.As(err, &pe) || !errors.Is(err, syscall.ESPIPE) || pe.Path != w.Name() {
		t.Fatalf("Range of a pipe: %v, want a PathError with ESPIPE", err)
	}
	f.Close()
	if err := Range(f, 0, 10); err == nil {
		t.Fatal("Range of a closed file: no error")
	}
}
