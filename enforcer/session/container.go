//go:build linux

package session

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// Container is an agent klock did not start: a container its runtime
// created (klock-runtime, klock oci-hook), whose init waits to exec the
// entrypoint. The session adopts its cgroup and its init instead of
// creating and launching them, judges the operations in the container's
// paths (as the kernel names them there: bpf-lsm and the observer walk up
// to the task's root), and backs up, leases, rolls back and logs the host
// paths those are, through Mounts. Paths no mount maps (a tmpfs, /proc)
// are the container's own: nothing to back up or lease, gone with it.
type Container struct {
	ID string
	// Pid is the container init's pid (the OCI state's).
	Pid int
	// Cgroup is its cgroup2 directory ("" reads it from /proc/<Pid>/cgroup).
	Cgroup string
	// Mounts map container paths to host paths (the root file system at
	// "/", bind mounts at their destinations): the longest Container
	// prefix of a path maps it.
	Mounts []vlog.Mount
	// WallFile, when set, is the host path of the wall.json klock-stage2
	// reads inside the container before it execs the entrypoint (the
	// runtime mode, klock-runtime): the session writes the Landlock wall
	// there, or "none" when bpf-lsm walls the files. Empty: hook-only mode,
	// no klock code runs inside the container.
	WallFile string
	Bundle   string
	// UID, GID and Groups are who the entrypoint runs as (the spec's
	// process.user): what it could change, and so what the backup holds.
	UID, GID uint32
	Groups   []uint32
	// Cwd is the entrypoint's working directory in the container (the
	// spec's process.cwd; "" for /).
	Cwd string
}

// Container modes, as the log names them.
const (
	ContainerRuntime = "runtime"
	ContainerHook    = "hook"
)

func (c *Container) mode() string {
	if c.WallFile != "" {
		return ContainerRuntime
	}
	return ContainerHook
}

// stageExecs is how many execs of the session's first process are klock's
// (or the runtime's) before the agent's own: stage 2, then the agent.
func (c *Container) stageExecs() int {
	if c == nil || c.WallFile != "" {
		return 2
	}
	return 1
}

// ToHost maps a container path to the host path it shows; ok is false
// when no mount maps it (the container's own tmpfs, /proc, ...).
func (c *Container) ToHost(p string) (string, bool) {
	best := -1
	for i, m := range c.Mounts {
		if under(p, m.Container) && (best < 0 || len(m.Container) > len(c.Mounts[best].Container)) {
			best = i
		}
	}
	if best < 0 || c.Mounts[best].Host == "" {
		return "", false
	}
	m := c.Mounts[best]
	rest := strings.TrimPrefix(p, m.Container)
	return filepath.Join(m.Host, rest), true
}

func under(p, dir string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

func (c *Container) vlog() *vlog.Container {
	ms := append([]vlog.Mount(nil), c.Mounts...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].Container < ms[j].Container })
	return &vlog.Container{ID: c.ID, Mode: c.mode(), Bundle: c.Bundle, Mounts: ms}
}

// hostManifest is m with its workdir and FILE and PROC intents at their
// host paths (the backup's, the leases', the rollback's and the log's): an
// intent no mount maps names what only the container has, and is left
// out. The workdir must map: the backups and the log live under it. A
// PROC intent names a program of the container's too (a rule to read it
// comes with it): left at its container path, the host's program of that
// name was leased, and its directory walked by every backup (the host's
// /usr/bin for PROVIDES PROC:/bin/*).
func (c *Container) hostManifest(m *policy.Manifest) (*policy.Manifest, error) {
	h := *m
	if m.Workdir != "" {
		w, ok := c.ToHost(m.Workdir)
		if !ok {
			return nil, fmt.Errorf("%w: the workdir %s is on no mount of the container that shows a host directory (bind-mount the workdir into it)", ErrSetup, m.Workdir)
		}
		h.Workdir = w
	}
	h.Intents = nil
	for _, in := range m.Intents {
		if in.Object.Type == policy.ObjFile || in.Object.Type == policy.ObjProc {
			p, ok := c.ToHost(in.Object.Path.Path)
			if !ok {
				continue
			}
			in.Object.Path.Path = p
		}
		h.Intents = append(h.Intents, in)
	}
	return &h, nil
}

// ToContainer maps a host path back to the container's (the most specific
// mount showing it); ok is false when no mount shows it.
func (c *Container) ToContainer(h string) (string, bool) {
	best := -1
	for i, m := range c.Mounts {
		if m.Host != "" && under(h, m.Host) && (best < 0 || len(m.Container) > len(c.Mounts[best].Container)) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	m := c.Mounts[best]
	return filepath.Join(m.Container, strings.TrimPrefix(h, m.Host)), true
}

// hostScopes maps rollback roots to the host; a root no mount maps is the
// container's own and gone with it.
func (c *Container) hostScopes(in []snapshot.Scope) []snapshot.Scope {
	var out []snapshot.Scope
	for _, s := range in {
		if h, ok := c.ToHost(s.Path); ok {
			out = append(out, snapshot.Scope{Path: h, Tree: s.Tree})
		}
	}
	return out
}

func (c *Container) hostPaths(in []string) []string {
	var out []string
	for _, p := range in {
		if h, ok := c.ToHost(p); ok {
			out = append(out, h)
		}
	}
	return out
}

// nameInContainer adds each rollback operation's container path.
func (c *Container) nameInContainer(ops []vlog.RollbackOp) {
	for i := range ops {
		if p, ok := c.ToContainer(ops[i].Path); ok {
			ops[i].ContainerPath = p
		}
	}
}

// backends are the log's entries for what the runtime mode puts inside
// the container (klock-stage2's Landlock wall, klock's seccomp deny list in
// the spec); hook-only mode puts nothing there, and says so.
func (c *Container) backends(plan *launch.LandlockPlan, lsmSkipped string) []vlog.Backend {
	if c.WallFile == "" {
		return []vlog.Backend{{Name: "oci-hooks", Guarantee: vlog.GuaranteeRecords, Details: []string{
			"hook-only mode (OCI createRuntime and poststop hooks): no klock code inside the container, no Landlock and no klock seccomp filter there; the container's own profile applies",
			"what walls it is below: bpf-lsm when the kernel has it, cgroup-net and cgroup-unix; else the tracepoints detect, kill and roll back",
		}}}
	}
	out := []vlog.Backend{{Name: "oci-runtime", Guarantee: vlog.GuaranteeBlocks, Details: []string{
		"klock-runtime rewrote the spec: noNewPrivileges, no capabilities, a non-root user unless allowed, klock's seccomp deny list merged into the container's profile (never widening it), <workdir>/.klock hidden under a read-only tmpfs",
		"klock-stage2 ran first in the container and put the wall up before the entrypoint's first instruction, with klock run's seccomp filter stacked on the container's own",
		"exec'd processes (runc exec, podman exec) are in the container's cgroup: the backends below see them",
	}}}
	if plan != nil {
		out = append(out, landlockBackend(plan, lsmSkipped))
	}
	return out
}

// scratch are the container's temporary places at their host paths, where
// its mounts show one (a tmpfs is the container's own, gone with it): the
// backup records the metadata of what the agent owns there
// (Preflight.Scratch), not of the host's /tmp, which it cannot reach.
func (c *Container) scratch() []string {
	out := []string{}
	for _, p := range []string{"/tmp", "/var/tmp", "/dev/shm", "/run/lock"} {
		if h, ok := c.ToHost(p); ok {
			out = append(out, h)
		}
		// A host directory mounted below one (the agent may own files
		// there as well).
		for _, m := range c.Mounts {
			if m.Host != "" && m.Container != p && under(m.Container, p) {
				out = append(out, m.Host)
			}
		}
	}
	return out
}
