//go:build linux

package realrun

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Area is one agent's (or workload's) directories: Dir/work is the
// workdir, made afresh at the same path for every run (a learned manifest
// names it) and moved aside after it; what klock writes beside a run
// (its outputs, the manifests) sits in Dir.
type Area struct {
	T       *testing.T // the (sub)test the area's failures go to
	Klock   string     // the klock under test
	Dir     string
	Work    string        // the workdir, Dir/work
	Timeout time.Duration // bounds one `klock run` (Suite.Timeout)
}

// NewArea makes root/name, an area for the suite's klock.
func (s Suite) NewArea(t *testing.T, root, name string) *Area {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &Area{T: t, Klock: s.Klock(t), Dir: dir, Work: filepath.Join(dir, "work"), Timeout: s.Timeout}
}

// W joins path elements under the workdir.
func (a *Area) W(rel ...string) string { return filepath.Join(append([]string{a.Work}, rel...)...) }

// Fresh makes an empty workdir owned by the agent; it fails the test when
// the last one was not moved aside.
func (a *Area) Fresh() {
	a.T.Helper()
	if _, err := os.Lstat(a.Work); err == nil {
		a.T.Fatalf("workdir %s already exists", a.Work)
	}
	a.Mkdir(a.Work)
}

// MoveAside moves p (the workdir, or another directory of the run's) to
// Dir/name, for inspection; a p already moved is left alone.
func (a *Area) MoveAside(p, name string) {
	a.T.Helper()
	if _, err := os.Lstat(p); err != nil {
		return
	}
	dst := filepath.Join(a.Dir, name)
	os.RemoveAll(dst)
	if err := os.Rename(p, dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		a.T.Fatal(err)
	}
}

// Mkdir makes directory p under Dir, it and the parents it made below Dir
// owned by the agent.
func (a *Area) Mkdir(p string) {
	a.T.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		a.T.Fatal(err)
	}
	for d := p; strings.HasPrefix(d, a.Dir+"/"); d = filepath.Dir(d) {
		if err := os.Chown(d, AgentUID, AgentGID); err != nil {
			a.T.Fatal(err)
		}
	}
}

// File writes an agent-owned file p under Dir, making its directories.
func (a *Area) File(p, content string, mode os.FileMode) {
	a.T.Helper()
	a.Mkdir(filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		a.T.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		a.T.Fatal(err)
	}
	if err := os.Chown(p, AgentUID, AgentGID); err != nil {
		a.T.Fatal(err)
	}
}

// ChownTree gives a tree the test made to the agent.
func ChownTree(t *testing.T, p string) {
	t.Helper()
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", AgentUID, AgentGID), p).CombinedOutput(); err != nil {
		t.Fatalf("chown %s: %v\n%s", p, err, out)
	}
}
