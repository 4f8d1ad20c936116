//go:build linux

package container

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

var (
	tarOnce sync.Once
	tarPath string
	tarDir  string // removed by TestMain
)

// busyboxTar is the busybox root filesystem as a tarball, for podman
// import (built once).
func busyboxTar(t *testing.T) string {
	tarOnce.Do(func() {
		d, err := os.MkdirTemp("", "kc-img-")
		if err != nil {
			t.Fatal(err)
		}
		tarDir = d
		rootfs := ctrtest.BusyboxRootfs(t, filepath.Join(d, "rootfs"))
		tarPath = ctrtest.RootfsTar(t, rootfs, filepath.Join(d, "rootfs.tar"))
	})
	if tarPath == "" {
		t.Fatal("the busybox image could not be built (see the first test)")
	}
	return tarPath
}

// TestPodmanRuntime: podman run --runtime klock-runtime with the manifest
// as an annotation on an image imported from a tarball: the declared write
// goes through; the undeclared one kills the container and the workdir is
// restored.
func TestPodmanRuntime(t *testing.T) {
	w := newWorld(t)
	p := ctrtest.Podman(t)
	img := p.Import(busyboxTar(t), "localhost/klock-busybox:latest")
	p.Runtime = w.runtime
	m := w.manifest()
	run := func(script string) ctrtest.Result {
		return p.Run("--network", "none", "-v", w.work+":/workspace", "--annotation", "io.klock.manifest="+m, img, "sh", "-c", script)
	}
	if r := run("echo declared > /workspace/out.txt"); r.Exit != 0 {
		t.Fatalf("declared write: %+v", r)
	}
	if got := w.content("out.txt"); got != "declared\n" {
		t.Fatalf("out.txt = %q", got)
	}
	if lg := w.log(); lg.Verdict != "CLEAN" || lg.Container == nil || lg.Container.Mode != "runtime" {
		t.Fatalf("log: verdict %s container %+v violations %+v", lg.Verdict, lg.Container, lg.Violations)
	}
	os.RemoveAll(filepath.Join(w.work, ".klock", "sessions"))
	os.Remove(filepath.Join(w.work, "out.txt"))

	if r := run("echo changed > /workspace/keep.txt; sleep 30"); r.Exit != 137 {
		t.Fatalf("undeclared write: %+v, want exit 137 (killed)", r)
	}
	if got := w.content("keep.txt"); got != "original\n" {
		t.Fatalf("keep.txt = %q after the kill, want it restored", got)
	}
	harness.AssertContainerLogged(t, w.log(), "/workspace/keep.txt", filepath.Join(w.work, "keep.txt"))
}

// TestPodmanHooksD: hook-only mode: klock oci-hook from a hooks.d file for
// containers with the annotation, podman's own runc, no spec rewrite (the
// container runs as root, with no klock code inside): the undeclared write
// is detected, the container killed and the workdir restored; a container
// without the annotation is not klock's.
func TestPodmanHooksD(t *testing.T) {
	w := newWorld(t)
	p := ctrtest.Podman(t)
	img := p.Import(busyboxTar(t), "localhost/klock-busybox:latest")
	hook := specs.Hook{Path: filepath.Join(w.bin, "klock"), Args: []string{"klock", "oci-hook"}, Env: []string{daemon.SocketEnv + "=" + w.sock}}
	ctrtest.WriteHooksD(t, p.HooksDir, "klock", hook, `^io\.klock\.manifest$`, "createRuntime", "poststop")
	m := w.manifest()
	if r := p.Run("--network", "none", "-v", w.work+":/workspace", img, "sh", "-c", "echo untouched > /workspace/free.txt"); r.Exit != 0 {
		t.Fatalf("a container without the annotation: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(w.work, ".klock")); err == nil {
		t.Fatalf("klock walled a container without the annotation")
	}
	r := p.Run("--network", "none", "-v", w.work+":/workspace", "--annotation", "io.klock.manifest="+m, img,
		"sh", "-c", "echo declared > /workspace/out.txt; echo changed > /workspace/keep.txt; sleep 30")
	if r.Exit != 137 {
		t.Fatalf("undeclared write in hook-only mode: %+v, want exit 137 (killed)", r)
	}
	if got := w.content("keep.txt"); got != "original\n" {
		b, _ := json.MarshalIndent(w.log(), "", " ")
		t.Fatalf("keep.txt = %q after the kill, want it restored\n%s", got, b)
	}
	lg := w.log()
	if lg.Container == nil || lg.Container.Mode != "hook" {
		t.Fatalf("log's container: %+v", lg.Container)
	}
	// No klock code runs inside: klockd's probe proved the network wall
	// in the container's cgroup and namespace before the entrypoint.
	if !canaryRefused(lg, "connect", "cgroup-net") {
		t.Fatalf("hook-only container's canaries: %v, want the connect refused by cgroup-net", lg.Canaries)
	}
	harness.AssertContainerLogged(t, lg, "/workspace/keep.txt", filepath.Join(w.work, "keep.txt"))
}
