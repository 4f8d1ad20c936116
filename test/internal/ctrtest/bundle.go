//go:build linux

package ctrtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Bind is a bind mount of the host path Host at the container path
// Container (rbind, rw unless ReadOnly).
type Bind struct {
	Host, Container string
	ReadOnly        bool
}

// BundleOptions shape the config.json NewBundle writes. The zero value runs
// `sh` as root in /, with a network namespace.
type BundleOptions struct {
	// Rootfs is an existing root filesystem; empty builds BusyboxRootfs in
	// the bundle.
	Rootfs string
	Args   []string // default ["sh"]
	Env    []string // default PATH=/bin
	// UID and GID of the process (0:0 by default: runc's default spec).
	UID, GID uint32
	Cwd      string // default "/"
	Binds    []Bind
	// Annotations are the spec's (e.g. io.klock.manifest).
	Annotations map[string]string
	// HostNetwork leaves the network namespace out (the host's network).
	HostNetwork bool
	// Hooks are the spec's hooks (createRuntime, poststop, ...).
	Hooks *specs.Hooks
	// CgroupsPath is linux.cgroupsPath; empty lets runc choose (/<id>).
	CgroupsPath string
	// ReadonlyRootfs mounts the root read-only, as `runc spec` does; the
	// default leaves it writable so a test may write /tmp.
	ReadonlyRootfs bool
}

// Bundle is an OCI bundle directory: Dir/config.json and the rootfs.
type Bundle struct {
	Dir    string
	Rootfs string
	Spec   *specs.Spec
}

// ConfigPath is Dir/config.json.
func (b *Bundle) ConfigPath() string { return filepath.Join(b.Dir, "config.json") }

// Write writes b.Spec to config.json (after a test edited it).
func (b *Bundle) Write(t testing.TB) {
	t.Helper()
	data, err := json.MarshalIndent(b.Spec, "", "\t")
	must(t, err)
	must(t, os.WriteFile(b.ConfigPath(), data, 0o644))
}

// Read reads config.json back into b.Spec (after a runtime such as
// klock-runtime rewrote it) and returns its bytes.
func (b *Bundle) Read(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(b.ConfigPath())
	must(t, err)
	var s specs.Spec
	must(t, json.Unmarshal(data, &s))
	b.Spec = &s
	return data
}

// NewBundle makes a bundle in a new temporary directory: the rootfs (built
// from busybox unless opts.Rootfs) and a config.json equal to `runc spec`'s
// default (runc 1.1) but for a non-terminal process, opts' fields, and a
// writable root unless ReadonlyRootfs.
func NewBundle(t testing.TB, opts BundleOptions) *Bundle {
	t.Helper()
	dir := t.TempDir()
	// The bundle directory is traversed by the container's non-root user
	// when the rootfs lives inside it.
	must(t, os.Chmod(dir, 0o755))
	rootfs, root := opts.Rootfs, opts.Rootfs
	if rootfs == "" {
		// root.path relative to the bundle, as containerd and podman write it.
		rootfs, root = BusyboxRootfs(t, filepath.Join(dir, "rootfs")), "rootfs"
	}
	b := &Bundle{Dir: dir, Rootfs: rootfs, Spec: Spec(root, opts)}
	b.Write(t)
	return b
}

// Spec is the config NewBundle writes with root.path rootfs, for a test
// that wants the value.
func Spec(rootfs string, opts BundleOptions) *specs.Spec {
	or := func(v, d []string) []string {
		if len(v) == 0 {
			return d
		}
		return v
	}
	cwd := opts.Cwd
	if cwd == "" {
		cwd = "/"
	}
	caps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	s := &specs.Spec{
		// What the engines write for runc 1.1 and crun 1.8: crun 1.8
		// refuses an ociVersion that is not 1.0.x ("unknown version
		// specified"), and the spec's fields used here are all 1.0's.
		Version: "1.0.2-dev",
		Root:    &specs.Root{Path: rootfs, Readonly: opts.ReadonlyRootfs},
		Process: &specs.Process{
			Args: or(opts.Args, []string{"sh"}),
			Env:  or(opts.Env, []string{"PATH=/bin"}),
			Cwd:  cwd,
			User: specs.User{UID: opts.UID, GID: opts.GID},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps, Ambient: caps,
			},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Hostname:    "ctrtest",
		Annotations: opts.Annotations,
		Hooks:       opts.Hooks,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: opts.CgroupsPath,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
			},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			MaskedPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
				"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
				"/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	if !opts.HostNetwork {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	for _, m := range opts.Binds {
		o := []string{"rbind", "rw"}
		if m.ReadOnly {
			o = []string{"rbind", "ro"}
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: m.Container, Type: "bind", Source: m.Host, Options: o})
	}
	return s
}
