//go:build linux

package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/enforcer/oci"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

// writeWall writes what klock-stage2 enforces inside the container
// (runtime mode): the Landlock wall planned on the container's file system
// as its mounts will show it, or none when bpf-lsm walls its files from
// outside, and the canaries the entrypoint's stage 2 proves it with
// (canaries: nil for none), whose report pipe it opens first (stage 2
// refuses to start the entrypoint with nobody reading it), and whether it
// waits for the session's release (gated). Hook-only mode
// (no WallFile) has no stage 2: nil, nil, nil.
func writeWall(c *Container, rs *policy.Ruleset, lsm, observed, gated bool, canaries *launch.Canaries) (*launch.LandlockPlan, *launch.AdoptedCanaries, error) {
	if c.WallFile == "" {
		return nil, nil, nil
	}
	w := stage2.ContainerWall{Protocol: stage2.Protocol, By: "bpf-lsm", DenyMetaIoctls: launch.MetaIoctlsRefused(rs, lsm, observed), Gated: gated}
	var plan *launch.LandlockPlan
	if !lsm {
		abi, err := launch.ProbeABI()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: container %s: neither bpf-lsm nor Landlock can wall its files: %v. Fix: klock doctor says what the kernel lacks", ErrDegraded, c.ID, err)
		}
		if plan, err = launch.PlanLandlockOn(rs, abi, containerFS{c}); err != nil {
			return nil, nil, fmt.Errorf("%w: container %s: %v", ErrSetup, c.ID, err)
		}
		w.By, w.Landlock = "landlock", plan.Wall()
	}
	var adopted *launch.AdoptedCanaries
	if canaries != nil {
		report, err := openCanaryReport(c)
		if err != nil {
			return nil, nil, err
		}
		adopted = &launch.AdoptedCanaries{Report: report}
		w.Canary, adopted.Skipped = launch.PlanCanaries(canaries, rs, plan)
	}
	if err := writeWallFile(c, w); err != nil {
		if adopted != nil {
			adopted.Report.Close()
		}
		return nil, nil, err
	}
	return plan, adopted, nil
}

func writeWallFile(c *Container, w stage2.ContainerWall) error {
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	tmp := c.WallFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o444); err != nil {
		return fmt.Errorf("%w: container %s: write its wall: %v", ErrSetup, c.ID, err)
	}
	if err := os.Rename(tmp, c.WallFile); err != nil {
		return fmt.Errorf("%w: container %s: write its wall: %v", ErrSetup, c.ID, err)
	}
	return nil
}

// openCanaryReport opens the read end of the pipe klock-runtime made
// beside the wall (oci.CanaryFileName), non-blocking: nothing waits for a
// writer here, launch.Adopt polls it.
func openCanaryReport(c *Container) (*os.File, error) {
	p := filepath.Join(filepath.Dir(c.WallFile), oci.CanaryFileName)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: container %s: the canaries' report pipe: %v (klock-runtime makes it at create: install klock-runtime and klockd of the same build)", ErrSetup, c.ID, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: container %s: %s is not a pipe", ErrSetup, c.ID, p)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// containerFS looks at a container's files as its mounts will show them:
// a path is resolved inside the host directory of the mount that maps it,
// links included (RESOLVE_IN_ROOT: an absolute link stays in that
// directory). An approximation where a link crosses mounts; stage 2 drops
// inside the container any rule whose path is not what the plan saw,
// which only narrows the wall.
type containerFS struct{ c *Container }

func (f containerFS) open(p string, follow bool) (*os.File, error) {
	best := -1
	for i, m := range f.c.Mounts {
		if under(p, m.Container) && (best < 0 || len(m.Container) > len(f.c.Mounts[best].Container)) {
			best = i
		}
	}
	if best < 0 {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
	}
	m := f.c.Mounts[best]
	if m.Host == "" {
		// The runtime's own mounts (/dev's tmpfs with the standard device
		// nodes, /proc, /sys) show what the host's do: the plan looks
		// there, and stage 2 drops inside the container a rule whose path
		// is not what the plan saw.
		m = vlog.Mount{Container: "/", Host: "/"}
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p, m.Container), "/")
	root, err := unix.Open(m.Host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) {
		// A file bind-mounted (a runtime's /etc/hosts, /etc/resolv.conf):
		// the path is that file, and nothing is below it.
		if rel != "" {
			return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
		}
		return os.Open(m.Host)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	defer unix.Close(root)
	if rel == "" {
		rel = "."
	}
	flags := uint64(unix.O_PATH | unix.O_CLOEXEC)
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_IN_ROOT})
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			err = fs.ErrNotExist
		}
		return nil, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(m.Host, rel)), nil
}

func (f containerFS) stat(p string, follow bool) (fs.FileInfo, error) {
	fh, err := f.open(p, follow)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return fh.Stat()
}

func (f containerFS) Stat(p string) (fs.FileInfo, error)  { return f.stat(p, true) }
func (f containerFS) Lstat(p string) (fs.FileInfo, error) { return f.stat(p, false) }

// EvalSymlinks keeps a path that is no link and gives up on one that is:
// the container's links are resolved by its kernel view, not here.
func (f containerFS) EvalSymlinks(p string) (string, error) {
	info, err := f.Lstat(p)
	if err != nil {
		return "", err
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("%s is a link in the container", p)
	}
	return p, nil
}
