//go:build linux

package ctrtest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

// DockerEnv is a private dockerd: its own data root, exec root and socket,
// no bridge and no iptables rules (containers run with --network none or
// host), its own managed containerd under the exec root.
type DockerEnv struct {
	t      testing.TB
	Docker string
	Dir    string
	Host   string // unix://.../d.sock for -H
}

// DockerClient is Debian's docker CLI (/usr/bin/docker, package docker.io)
// when present, else docker on PATH; a newer CLI negotiates down to
// dockerd 20.10's API.
func DockerClient() (string, error) {
	if exists("/usr/bin/docker") {
		return "/usr/bin/docker", nil
	}
	return exec.LookPath("docker")
}

// DockerRuntime is an entry of daemon.json's "runtimes": the runtime's
// path and the arguments dockerd passes before the command (runtimeArgs:
// the one per-runtime channel Docker 20.10 has, since its API (1.41) has
// no annotations and labels never reach the spec).
type DockerRuntime struct {
	Path string   `json:"path"`
	Args []string `json:"runtimeArgs,omitempty"`
}

// Docker starts a private dockerd with the OCI runtimes named in runtimes
// (`docker run --runtime NAME`, through a private daemon.json), Unavailable
// without root or dockerd and a docker CLI, skipped (even under
// KLOCK_REQUIRE_PRIVILEGED=1) saying why when the daemon cannot start. It
// is stopped when the test ends.
func Docker(t testing.TB, runtimes map[string]DockerRuntime) *DockerEnv {
	t.Helper()
	Runc(t)
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		testutil.Unavailable(t, "no dockerd on PATH (scripts/deps.sh containers: docker.io)")
	}
	cli, err := DockerClient()
	if err != nil {
		testutil.Unavailable(t, "no docker CLI (scripts/deps.sh containers: docker.io)")
	}
	dir, err := os.MkdirTemp(shortTmp(), "dkd")
	must(t, err)
	e := &DockerEnv{t: t, Docker: cli, Dir: dir, Host: "unix://" + filepath.Join(dir, "d.sock")}
	t.Cleanup(func() { unmountUnder(dir); _ = os.RemoveAll(dir) })
	args := []string{
		"--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"),
		"-H", e.Host,
		"--bridge", "none", "--iptables=false", "--ip-masq=false",
		"--containerd-namespace", "klocktest", "--containerd-plugins-namespace", "klocktest-plugins",
	}
	conf, err := json.Marshal(map[string]any{"runtimes": runtimes})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "daemon.json"), conf, 0o644))
	args = append(args, "--config-file", filepath.Join(dir, "daemon.json"))
	d := startDaemon(t, "dockerd", bin, args, func() bool {
		return exists(filepath.Join(dir, "d.sock")) && e.Cmd("version").Exit == 0
	})
	// dockerd stops its containers and its containerd on SIGTERM.
	t.Cleanup(d.stop)
	return e
}

// Cmd runs `docker -H SOCK ARGS...`.
func (e *DockerEnv) Cmd(args ...string) Result {
	cmd := exec.Command(e.Docker, append([]string{"-H", e.Host}, args...)...)
	// No client config from the host's $HOME (contexts, credential helpers).
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(e.Dir, "client"))
	return run(cmd)
}

// Import imports a rootfs tarball (RootfsTar) as image name.
func (e *DockerEnv) Import(tarPath, name string) string {
	e.t.Helper()
	if r := e.Cmd("import", tarPath, name); r.Exit != 0 {
		e.t.Fatalf("docker import: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	return name
}

// Run is `docker run --rm OPTS...` (options, image, command).
func (e *DockerEnv) Run(opts ...string) Result {
	return e.Cmd(append([]string{"run", "--rm"}, opts...)...)
}
