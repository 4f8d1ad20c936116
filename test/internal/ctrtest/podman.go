//go:build linux

package ctrtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
)

// PodmanEnv is a podman with private storage: its own --root, --runroot,
// --tmpdir and hooks dir under a temporary directory, so a test never sees
// or touches the host's images and containers.
type PodmanEnv struct {
	t        testing.TB
	Bin      string
	Dir      string
	HooksDir string // --hooks-dir; write files with WriteHooksD
	// Runtime is podman's --runtime: runc by default (see doc.go: crun
	// refuses the hybrid cgroup hierarchy); a test sets klock-runtime.
	Runtime string
}

// PodmanUlimits are the rlimits every Run passes: podman's default
// RLIMIT_NOFILE (1048576) and RLIMIT_NPROC exceed what a root without
// CAP_SYS_RESOURCE in its user namespace may set (kind-style machines), so
// plain `podman run` dies in runc with "error setting rlimit type 7".
var PodmanUlimits = []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

// Podman is a private PodmanEnv, or Unavailable without root or podman or
// runc. Its storage is reset and removed when the test ends.
func Podman(t testing.TB) *PodmanEnv {
	t.Helper()
	runc := Runc(t)
	bin, err := exec.LookPath("podman")
	if err != nil {
		testutil.Unavailable(t, "no podman on PATH (scripts/deps.sh containers)")
	}
	// A short directory: podman refuses a --runroot longer than 50
	// characters ("the specified runroot is longer than 50 characters"),
	// which a TempDir named after the test soon is.
	dir, err := os.MkdirTemp(shortTmp(), "pm")
	must(t, err)
	must(t, os.Chmod(dir, 0o755))
	p := &PodmanEnv{t: t, Bin: bin, Dir: dir, HooksDir: filepath.Join(dir, "hooks.d"), Runtime: runc}
	for _, d := range []string{p.HooksDir, filepath.Join(dir, "tmp"), filepath.Join(dir, "cni")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	t.Cleanup(func() { p.cleanup(); _ = os.RemoveAll(dir) })
	return p
}

// shortTmp is $TMPDIR when short enough for podman's runroot and a unix
// socket path, else /tmp.
func shortTmp() string {
	if d := os.TempDir(); len(d) <= 20 {
		return d
	}
	return "/tmp"
}

// Global are the flags before every podman command: private storage
// (overlay), the cgroupfs manager and file events (no systemd, no journald
// here), the hooks dir and the runtime.
func (p *PodmanEnv) Global() []string {
	return []string{
		"--root", filepath.Join(p.Dir, "root"),
		"--runroot", filepath.Join(p.Dir, "run"),
		"--tmpdir", filepath.Join(p.Dir, "tmp"),
		"--storage-driver", "overlay",
		"--cgroup-manager", "cgroupfs",
		"--events-backend", "file",
		"--hooks-dir", p.HooksDir,
		"--network-config-dir", filepath.Join(p.Dir, "cni"),
		"--runtime", p.Runtime,
	}
}

// Cmd runs `podman GLOBAL ARGS...`.
func (p *PodmanEnv) Cmd(args ...string) Result {
	cmd := exec.Command(p.Bin, append(p.Global(), args...)...)
	// containers.conf and storage.conf from the host still apply; the
	// flags above override what matters. CONTAINERS_CONF is not set so
	// the distribution defaults (seccomp profile, default capabilities)
	// stay those a real podman uses.
	return run(cmd)
}

// MustCmd is Cmd failing t unless it exits 0.
func (p *PodmanEnv) MustCmd(args ...string) Result {
	p.t.Helper()
	r := p.Cmd(args...)
	if r.Exit != 0 {
		p.t.Fatalf("podman %s: exit %d\n%s%s", strings.Join(args, " "), r.Exit, r.Stdout, r.Stderr)
	}
	return r
}

// Import imports a rootfs tarball (RootfsTar) as image name (e.g.
// localhost/klock-busybox:latest) and returns name.
func (p *PodmanEnv) Import(tarPath, name string) string {
	p.t.Helper()
	p.MustCmd("import", tarPath, name)
	return name
}

// Run is `podman run --rm ULIMITS OPTS...`: opts are run's options, then
// the image and the command (e.g. "--network", "none", image, "sh", "-c",
// "..."). The OCI runtime is p.Runtime (a test sets klock-runtime there).
func (p *PodmanEnv) Run(opts ...string) Result {
	return p.Cmd(append(append([]string{"run", "--rm"}, PodmanUlimits...), opts...)...)
}

var bridgeSeq atomic.Uint32

// Bridge defines a private CNI bridge network (its conflist in the env's
// --network-config-dir, its IPAM state under Dir, its own bridge device,
// no masquerade and no firewall rules) and returns the name for
// `--network NAME` and the host's address on it (the gateway), where a
// test may listen. The bridge device is deleted when the test ends: the
// CNI bridge plugin never deletes it (podman's default network leaves
// cni-podman0 behind on the host).
func (p *PodmanEnv) Bridge() (name, gateway string) {
	p.t.Helper()
	n := (uint32(os.Getpid())*7 + bridgeSeq.Add(1)) % 250
	name = fmt.Sprintf("klocktest%d", n)
	dev := fmt.Sprintf("kt%d-%d", os.Getpid()%100000, n)
	gateway = fmt.Sprintf("10.231.%d.1", n)
	conf := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": %q, "plugins": [{"type": "bridge", "bridge": %q,
 "isGateway": true, "ipMasq": false, "hairpinMode": true, "ipam": {"type": "host-local",
 "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "10.231.%d.0/24", "gateway": %q}]],
 "dataDir": %q}}]}`, name, dev, n, gateway, filepath.Join(p.Dir, "cni-ipam"))
	must(p.t, os.WriteFile(filepath.Join(p.Dir, "cni", name+".conflist"), []byte(conf), 0o644))
	p.t.Cleanup(func() {
		if l, err := netlink.LinkByName(dev); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	return name, gateway
}

// cleanup removes every container and image, then unmounts whatever the
// storage left mounted under Dir so TempDir's removal succeeds.
func (p *PodmanEnv) cleanup() {
	_ = run(exec.Command(p.Bin, append(p.Global(), "rm", "--all", "--force")...))
	_ = run(exec.Command(p.Bin, append(p.Global(), "system", "reset", "--force")...))
	unmountUnder(p.Dir)
}

// unmountUnder detaches every mount below dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mps []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			mps = append(mps, fields[4])
		}
	}
	for i := len(mps) - 1; i >= 0; i-- {
		_ = unix.Unmount(mps[i], unix.MNT_DETACH)
	}
}
