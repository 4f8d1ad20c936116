//go:build linux

package ctrtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

// ContainerdEnv is a private containerd: its own root, state and socket
// under a temporary directory, and the CRI plugin off and a namespace of
// its own (klocktest-<dir>), or the CRI plugin on (ContainerdCRI). (containerd's runc shim still keeps runc state in
// /run/containerd/runc/<namespace> and its sockets in /run/containerd/s:
// the shim's paths are not configurable.)
type ContainerdEnv struct {
	t         testing.TB
	Ctr       string
	Dir       string
	Address   string
	Namespace string
}

// Containerd starts a private containerd, Unavailable without root or the
// containerd and ctr binaries, skipped (even under KLOCK_REQUIRE_PRIVILEGED=1)
// saying why when the daemon cannot start. It is stopped when the test
// ends.
func Containerd(t testing.TB) *ContainerdEnv {
	t.Helper()
	return startContainerd(t, "", `disabled_plugins = ["io.containerd.grpc.v1.cri"]`)
}

// ContainerdCRI starts a private containerd as Containerd does, but with
// the CRI plugin on, serving the CRI's gRPC services on Address. conf
// returns the rest of the config (version 2) given Dir: the CRI plugin's
// tables and its runtimes, which must keep the runc shims' state under Dir
// (options Root), since the namespace is the CRI's own, k8s.io. The CRI's sandboxes and containers must be removed
// before the test ends (the shims outlive containerd).
func ContainerdCRI(t testing.TB, conf func(dir string) string) *ContainerdEnv {
	t.Helper()
	return startContainerd(t, "k8s.io", "", conf)
}

func startContainerd(t testing.TB, namespace, disabled string, conf ...func(dir string) string) *ContainerdEnv {
	t.Helper()
	Runc(t)
	bin, err := exec.LookPath("containerd")
	if err != nil {
		testutil.Unavailable(t, "no containerd on PATH (scripts/deps.sh containers)")
	}
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		testutil.Unavailable(t, "no ctr on PATH (scripts/deps.sh containers)")
	}
	// A short path: the socket's must fit sun_path (108 bytes).
	dir, err := os.MkdirTemp(shortTmp(), "ctd")
	must(t, err)
	own := namespace == ""
	if own {
		// Unique: the shim keeps runc's state in /run/containerd/runc/<ns>,
		// shared by every containerd on the host.
		namespace = "klocktest-" + filepath.Base(dir)
	}
	c := &ContainerdEnv{t: t, Ctr: ctr, Dir: dir, Address: filepath.Join(dir, "c.sock"), Namespace: namespace}
	t.Cleanup(func() {
		unmountUnder(dir)
		_ = os.RemoveAll(dir)
		if own {
			_ = os.RemoveAll("/run/containerd/runc/" + c.Namespace)
		}
	})
	text := fmt.Sprintf(`version = 2
root = %q
state = %q
%s
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), disabled, c.Address, c.Address+".ttrpc")
	for _, f := range conf {
		text += f(dir)
	}
	must(t, os.WriteFile(filepath.Join(dir, "config.toml"), []byte(text), 0o644))
	d := startDaemon(t, "containerd", bin, []string{"--config", filepath.Join(dir, "config.toml")}, func() bool {
		return exists(c.Address) && c.Cmd("version").Exit == 0
	})
	// Stop the daemon before its directory goes (cleanups run last first).
	t.Cleanup(func() {
		if own {
			_ = c.Cmd("tasks", "kill", "--all") // nothing should be left; best effort
		}
		d.stop()
	})
	return c
}

// Cmd runs `ctr --address SOCK --namespace NS ARGS...`.
func (c *ContainerdEnv) Cmd(args ...string) Result {
	return run(exec.Command(c.Ctr, append([]string{"--address", c.Address, "--namespace", c.Namespace}, args...)...))
}

// Import imports an OCI archive (OCIArchive) and returns the image's name.
func (c *ContainerdEnv) Import(archive, name string) string {
	c.t.Helper()
	if r := c.Cmd("image", "import", archive); r.Exit != 0 {
		c.t.Fatalf("ctr image import: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	return name
}

// Run is `ctr run --rm --runc-binary RUNTIME [opts...] IMAGE ID ARGS...`:
// runtimePath is runc or klock-runtime (the runc shim execs it with
// --root, --log and --log-format before the command). opts are ctr run's
// options (--mount, --label, --net-host ...).
func (c *ContainerdEnv) Run(runtimePath, image, id string, opts []string, args ...string) Result {
	a := append([]string{"run", "--rm", "--runc-binary", runtimePath}, opts...)
	a = append(append(a, image, id), args...)
	return c.Cmd(a...)
}
