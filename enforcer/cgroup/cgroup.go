//go:build linux

package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// ErrNoCgroup2 means no cgroup2 file system is mounted.
var ErrNoCgroup2 = errors.New("no cgroup2 file system is mounted (mount -t cgroup2 none /sys/fs/cgroup)")

// Parent is the directory under the cgroup2 mount that holds sessions.
const Parent = "klock"

// Mountpoint returns where cgroup2 is mounted, read from /proc/self/mountinfo.
func Mountpoint() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	return parseMountinfo(bufio.NewScanner(f))
}

func parseMountinfo(s *bufio.Scanner) (string, error) {
	for s.Scan() {
		// 41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if len(fields) >= 5 && len(postFields) >= 1 && postFields[0] == "cgroup2" && fields[3] == "/" {
			return unescapeOctal(fields[4]), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", ErrNoCgroup2
}

// unescapeOctal undoes mountinfo's \040-style escapes.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
				}
				v = v*8 + c - '0'
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Group is one session's cgroup.
type Group struct {
	Path string // absolute directory
	ID   uint64 // cgroup id: the directory's inode number
	mgr  *cgroup2.Manager
}

// Create makes <mount>/klock/<name>, failing if it already exists.
func Create(name string) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup: invalid session name %q", name)
	}
	mp, err := Mountpoint()
	if err != nil {
		return nil, err
	}
	parent := filepath.Join(mp, Parent)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: create %s: %w", parent, err)
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: create %s: %w", dir, err)
	}
	return open(mp, dir)
}

// Open returns an existing session group.
func Open(name string) (*Group, error) {
	mp, err := Mountpoint()
	if err != nil {
		return nil, err
	}
	return open(mp, filepath.Join(mp, Parent, name))
}

func open(mp, dir string) (*Group, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, fmt.Errorf("cgroup: stat %s: %w", dir, err)
	}
	rel, err := filepath.Rel(mp, dir)
	if err != nil {
		return nil, err
	}
	mgr, err := cgroup2.Load("/"+rel, cgroup2.WithMountpoint(mp))
	if err != nil {
		return nil, fmt.Errorf("cgroup: load %s: %w", dir, err)
	}
	return &Group{Path: dir, ID: st.Ino, mgr: mgr}, nil
}

// OpenFD opens the group directory for SysProcAttr.CgroupFD, so a child is
// born inside the group (clone3 CLONE_INTO_CGROUP): no start-up race.
func (g *Group) OpenFD() (*os.File, error) {
	f, err := os.OpenFile(g.Path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open %s: %w", g.Path, err)
	}
	return f, nil
}

// Procs lists the pids in the group and its children.
func (g *Group) Procs() ([]uint64, error) { return g.mgr.Procs(true) }

// Kill sends SIGKILL to every process in the group at once (cgroup.kill).
func (g *Group) Kill() error {
	if err := os.WriteFile(filepath.Join(g.Path, "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("cgroup: kill %s: %w", g.Path, err)
	}
	return nil
}

// Freeze stops every process of the group where it is (cgroup.freeze),
// returning once the kernel says the group is frozen.
func (g *Group) Freeze() error {
	if err := g.mgr.Freeze(); err != nil {
		return fmt.Errorf("cgroup: freeze %s: %w", g.Path, err)
	}
	return nil
}

// Thaw lets a frozen group's processes run again.
func (g *Group) Thaw() error {
	if err := g.mgr.Thaw(); err != nil {
		return fmt.Errorf("cgroup: thaw %s: %w", g.Path, err)
	}
	return nil
}

// Delete kills what is left, waits for the group to empty (bounded), and
// removes it.
func (g *Group) Delete() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		procs, err := g.Procs()
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err == nil && len(procs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %s still has processes %v after kill", g.Path, procs)
		}
		_ = g.Kill()
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.mgr.Delete(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cgroup: remove %s: %w", g.Path, err)
	}
	return nil
}

// SweepStale removes session groups under <mount>/klock/ that are empty
// and older than age: those of a klock that was killed before it removed
// its own (kill -9, a crash). A live session's group holds its processes
// from its first milliseconds, so age only spares a group in that
// instant. A group that is not empty, or fills meanwhile (rmdir then
// fails with EBUSY), stays. It returns the groups removed.
func SweepStale(age time.Duration) ([]string, error) {
	mp, err := Mountpoint()
	if err != nil {
		return nil, err
	}
	parent := filepath.Join(mp, Parent)
	ents, err := os.ReadDir(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup: sweep %s: %w", parent, err)
	}
	cutoff := time.Now().Add(-age)
	var removed []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		info, err := e.Info()
		if err != nil || info.ModTime().After(cutoff) || populated(dir) {
			continue
		}
		if err := unix.Rmdir(dir); err == nil {
			removed = append(removed, dir)
		}
	}
	return removed, nil
}

// Alive reports whether the session group <mount>/klock/<name> exists and
// holds a process: whether the session is running (another klock's
// included). What cannot be read counts as alive.
func Alive(name string) bool {
	mp, err := Mountpoint()
	if err != nil {
		return true
	}
	dir := filepath.Join(mp, Parent, name)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return false
	}
	return populated(dir)
}

// populated reads cgroup.events; a group whose state cannot be read counts
// as populated (it is left alone).
func populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return true
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "populated "); ok {
			return v != "0"
		}
	}
	return true
}

// OpenPath returns the group at an absolute directory of the cgroup2 mount
// that klock did not create (a container's, made by its runtime). Close
// nothing and Delete nothing on it: the runtime owns it.
func OpenPath(dir string) (*Group, error) {
	mp, err := Mountpoint()
	if err != nil {
		return nil, err
	}
	if rel, err := filepath.Rel(mp, dir); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("cgroup: %s is not a group below the cgroup2 mount %s", dir, mp)
	}
	return open(mp, dir)
}

// OfPid returns the absolute directory of the cgroup2 group pid is in,
// read from /proc/<pid>/cgroup (the "0::" line).
func OfPid(pid int) (string, error) {
	mp, err := Mountpoint()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", fmt.Errorf("cgroup: of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mp, rest), nil
		}
	}
	return "", fmt.Errorf("cgroup: pid %d is in no cgroup2 group (/proc/%d/cgroup has no 0:: line)", pid, pid)
}
