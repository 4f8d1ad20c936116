package vlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrSchema marks a file that is not a klock.verification/v1 log.
var ErrSchema = errors.New("not a " + Schema + " verification log")

// Write stores the log atomically as <dir>/verification.json (mode 0600):
// a temp file in dir, fsync, rename, fsync of dir. It returns the path.
func (l *Log) Write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("verification log: %w", err)
	}
	f, err := os.CreateTemp(dir, ".verification-*.json.tmp")
	if err != nil {
		return "", fmt.Errorf("verification log: %w", err)
	}
	tmp := f.Name()
	fail := func(step string, err error) (string, error) {
		f.Close()
		os.Remove(tmp)
		return "", fmt.Errorf("verification log: %s: %w", step, err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fail("chmod", err)
	}
	if err := l.encodeTo(f); err != nil {
		return fail("write", err)
	}
	if err := f.Sync(); err != nil {
		return fail("fsync", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("verification log: close: %w", err)
	}
	dst := filepath.Join(dir, FileName)
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("verification log: rename: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return dst, fmt.Errorf("verification log: fsync dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return dst, fmt.Errorf("verification log: fsync dir: %w", err)
	}
	return dst, nil
}

// Read loads a verification log; path may be the file or its directory.
func Read(path string) (*Log, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, FileName)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("verification log: %w", err)
	}
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("verification log %s: %w", path, err)
	}
	if head.Schema != Schema {
		return nil, fmt.Errorf("%w: %s has schema %q", ErrSchema, path, head.Schema)
	}
	var l Log
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("verification log %s: %w", path, err)
	}
	return &l, nil
}
