//go:build linux

package cri

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// Image names in containerd's k8s.io namespace.
const (
	pauseImage   = "docker.io/klock/pause:latest"
	busyboxImage = "docker.io/klock/busybox:latest"
	// handler is the RuntimeClass's handler, the CRI's runtime_handler.
	handler = "klock"
)

// node is one test's "node": klockd, containerd with the klock handler,
// the CRI client, and an agent workdir.
type node struct {
	t   *testing.T
	dir string
	// cgroup is the pods' cgroup parent, as the kubelet names one
	// (kubepods/...): the test's own, removed when it ends.
	cgroup string
	work   string // the agent's workdir on the node, its pod's hostPath
	ctd    *ctrtest.ContainerdEnv
	rt     cri.RuntimeServiceClient
}

func newNode(t *testing.T) *node {
	testutil.RequirePrivileged(t)
	bin := harness.KlockBins(t)
	dir, err := os.MkdirTemp("/tmp", "kcri")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	n := &node{t: t, dir: dir, work: filepath.Join(dir, "work"), cgroup: "/klocktest-" + filepath.Base(dir)}
	sock := harness.Klockd(t, dir, nil)
	wrapper := n.runtimeWrapper(bin, sock)
	handlerConf := deployedHandler(t, wrapper)
	c := ctrtest.ContainerdCRI(t, func(cdir string) string { return criConfig(cdir, handlerConf) })
	n.ctd = c
	if r := c.Cmd("plugins", "ls"); !criOK(r.Stdout) {
		testutil.Unavailable(t, "containerd's CRI plugin did not load (ctr plugins ls):\n"+r.Stdout)
	}
	n.importImages(c)
	conn, err := grpc.NewClient("unix://"+c.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	n.rt = cri.NewRuntimeServiceClient(conn)
	// Registered after containerd's start: runs before its stop.
	t.Cleanup(func() {
		n.removePods()
		removeCgroup(n.cgroup)
	})
	must(t, os.Mkdir(n.work, 0o755))
	// The agent runs as nobody (klock-runtime's non-root user).
	must(t, os.Chown(n.work, harness.AgentUID, harness.AgentGID))
	n.file("keep.txt", "original\n")
	return n
}

// runtimeWrapper is klock-runtime as the shim runs it: a script naming the
// test's klockd (the OCI hooks inherit the runtime's environment) and the
// test's runtime.yaml, which maps the container named "agent" to a strict
// manifest for /workspace.
func (n *node) runtimeWrapper(bin, sock string) string {
	intents := []string{"PROVIDES FILE:/workspace/out.txt", "MUTATES FILE:/workspace/out.txt", "PROVIDES PROC:/bin/*"}
	manifest := filepath.Join(n.dir, "agent.yaml")
	must(n.t, os.WriteFile(manifest, []byte(harness.ManifestYAML("/workspace", "strict", intents)), 0o644))
	conf := filepath.Join(n.dir, "runtime.yaml")
	must(n.t, os.WriteFile(conf, []byte(fmt.Sprintf(`manifests:
  - match: {annotation: "io.kubernetes.cri.container-name=agent"}
    manifest: %s
`, manifest)), 0o644))
	p := filepath.Join(n.dir, "klock-runtime")
	script := fmt.Sprintf("#!/bin/sh\nexport %s=%s\nexec %s --klock-config=%s \"$@\"\n",
		daemon.SocketEnv, sock, filepath.Join(bin, "klock-runtime"), conf)
	must(n.t, os.WriteFile(p, []byte(script), 0o755))
	return p
}

// deployedHandler is deploy/containerd/klock-runtime.toml with BinaryName
// set to binary, and without its version line (the config has its own).
func deployedHandler(t *testing.T, binary string) string {
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "deploy", "containerd", "klock-runtime.toml"))
	must(t, err)
	var out []string
	replaced := 0
	for _, l := range strings.Split(string(b), "\n") {
		switch k := strings.TrimSpace(l); {
		case strings.HasPrefix(k, "version"):
			continue
		case strings.HasPrefix(k, "BinaryName"):
			l = fmt.Sprintf("    BinaryName = %q", binary)
			replaced++
		}
		out = append(out, l)
	}
	if replaced != 1 {
		t.Fatalf("klock-runtime.toml sets BinaryName %d times, want once", replaced)
	}
	return strings.Join(out, "\n")
}

// criConfig turns the CRI plugin on: the pause-like sandbox image, no CNI
// config (the pods share the node's network), the default runc runtime (a
// config that names runtimes replaces containerd's default list) and the
// deployed handler; both shims keep runc's state under dir.
func criConfig(dir, handlerConf string) string {
	runcRoot := filepath.Join(dir, "runc")
	return fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = %q
%s
    Root = %q
`, pauseImage, filepath.Join(dir, "cni", "bin"), filepath.Join(dir, "cni", "conf"), runcRoot, handlerConf, runcRoot)
}

// importImages builds the pause-like image (busybox's sleep, alone) and
// the busybox image, and imports both into the CRI's namespace.
func (n *node) importImages(c *ctrtest.ContainerdEnv) {
	d := filepath.Join(n.dir, "images")
	pause := filepath.Join(d, "pause")
	must(n.t, os.MkdirAll(filepath.Join(pause, "bin"), 0o755))
	bb, err := os.ReadFile(ctrtest.BusyboxPath)
	must(n.t, err)
	must(n.t, os.WriteFile(filepath.Join(pause, "bin", "busybox"), bb, 0o755))
	must(n.t, os.Symlink("busybox", filepath.Join(pause, "bin", "sleep")))
	c.Import(ctrtest.OCIArchiveCmd(n.t, pause, pauseImage, filepath.Join(d, "pause.tar"), []string{"/bin/sleep", "2147483647"}), pauseImage)
	rootfs := ctrtest.BusyboxRootfs(n.t, filepath.Join(d, "busybox"))
	c.Import(ctrtest.OCIArchive(n.t, rootfs, busyboxImage, filepath.Join(d, "busybox.tar")), busyboxImage)
}

func (n *node) file(rel, content string) {
	p := filepath.Join(n.work, rel)
	must(n.t, os.WriteFile(p, []byte(content), 0o644))
	must(n.t, os.Chown(p, harness.AgentUID, harness.AgentGID))
}

// content is a workdir file's bytes, or "<absent>".
func (n *node) content(rel string) string {
	b, err := os.ReadFile(filepath.Join(n.work, rel))
	if err != nil {
		return "<absent>"
	}
	return string(b)
}

// log reads the only verification log under the workdir.
func (n *node) log(t testing.TB) *vlog.Log {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(n.work, ".klock", "sessions", "*", "verification.json"))
	if len(logs) != 1 {
		t.Fatalf("verification logs under %s: %v, want one", n.work, logs)
	}
	lg, err := vlog.Read(logs[0])
	must(t, err)
	return lg
}

// removePods stops and removes every pod sandbox: the shims and their
// mounts outlive containerd otherwise.
func (n *node) removePods() {
	ctx := context.Background()
	pods, err := n.rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		n.t.Logf("ListPodSandbox: %v", err)
		return
	}
	for _, p := range pods.Items {
		if _, err := n.rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			n.t.Logf("StopPodSandbox %s: %v", p.Id, err)
		}
		if _, err := n.rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			n.t.Logf("RemovePodSandbox %s: %v", p.Id, err)
		}
	}
}

// criOK reports whether `ctr plugins ls` lists the CRI plugin as ok.
func criOK(plugins string) bool {
	for _, l := range strings.Split(plugins, "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == "io.containerd.grpc.v1" && f[1] == "cri" {
			return f[len(f)-1] == "ok"
		}
	}
	return false
}

// removeCgroup removes the (empty, once the pods are gone) cgroup parent
// from every hierarchy: v1's controllers and v2's unified tree.
func removeCgroup(parent string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
	for _, d := range append(dirs, filepath.Join("/sys/fs/cgroup", parent)) {
		_ = os.Remove(d)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// exited waits for the container to exit (polled; a bound on progress of
// two minutes, not a measurement) and returns its status.
func (n *node) exited(t testing.TB, id string) *cri.ContainerStatus {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, err := n.rt.ContainerStatus(context.Background(), &cri.ContainerStatusRequest{ContainerId: id})
		must(t, err)
		if r.Status.State == cri.ContainerState_CONTAINER_EXITED {
			return r.Status
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still %s after two minutes", id, r.Status.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stdout is the container's stdout from its CRI log (lines of
// "TIME STREAM TAG MESSAGE").
func stdout(t testing.TB, path string) string {
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	var b strings.Builder
	s := bufio.NewScanner(f)
	for s.Scan() {
		if f := strings.SplitN(s.Text(), " ", 4); len(f) == 4 && f[1] == "stdout" {
			b.WriteString(f[3] + "\n")
		}
	}
	return b.String()
}
