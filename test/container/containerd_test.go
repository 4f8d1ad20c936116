//go:build linux

package container

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
)

var (
	ociOnce sync.Once
	ociPath string
	ociDir  string // removed by TestMain
)

// ociImage is the busybox root filesystem as an OCI image layout tarball,
// for `ctr image import` (built once).
func ociImage(t *testing.T) string {
	ociOnce.Do(func() {
		d, err := os.MkdirTemp("", "kc-oci-")
		if err != nil {
			t.Fatal(err)
		}
		ociDir = d
		rootfs := ctrtest.BusyboxRootfs(t, filepath.Join(d, "rootfs"))
		ociPath = ctrtest.OCIArchive(t, rootfs, busyboxImage, filepath.Join(d, "busybox.oci.tar"))
	})
	if ociPath == "" {
		t.Fatal("the busybox OCI image could not be built (see the first test)")
	}
	return ociPath
}

// busyboxImage is the name the test images take in containerd and Docker.
const busyboxImage = "docker.io/klock/busybox:latest"

// TestContainerd: `ctr run --runc-binary klock-runtime --annotation
// io.klock.manifest=...`: containerd's runc shim calls the runtime with
// --root, --log and --log-format json before create, start and delete;
// the hooks inherit the shim-started runtime's environment (the wrapper's
// KLOCK_SOCKET). The declared write goes through with a CLEAN log; the
// undeclared one kills the container (ctr reports 137), the workdir is
// restored byte for byte and the log names both paths.
func TestContainerd(t *testing.T) {
	w := newWorld(t)
	c := ctrtest.Containerd(t)
	img := c.Import(ociImage(t), busyboxImage)
	m := w.manifest()
	run := func(id, script string) ctrtest.Result {
		return c.Run(w.runtime, img, id, []string{
			"--mount", "type=bind,src=" + w.work + ",dst=/workspace,options=rbind:rw",
			"--annotation", "io.klock.manifest=" + m,
		}, "sh", "-c", script)
	}

	t.Run("DeclaredWrite", func(t *testing.T) {
		if r := run("kc-ctd-clean", "id -u; echo declared > /workspace/out.txt"); r.Exit != 0 || r.Stdout != "65534\n" {
			t.Fatalf("ctr run: %+v (want exit 0, uid 65534: the rewritten spec's user)", r)
		}
		if got := w.content("out.txt"); got != "declared\n" {
			t.Fatalf("out.txt = %q", got)
		}
		lg := w.log()
		if lg.Verdict != "CLEAN" || lg.Container == nil || lg.Container.ID != "kc-ctd-clean" || lg.Container.Mode != "runtime" {
			t.Fatalf("log: verdict %s, container %+v, violations %+v", lg.Verdict, lg.Container, lg.Violations)
		}
	})
	os.RemoveAll(filepath.Join(w.work, ".klock", "sessions"))
	os.Remove(filepath.Join(w.work, "out.txt"))

	t.Run("StrictKill", func(t *testing.T) {
		r := run("kc-ctd-kill", "echo declared > /workspace/out.txt; echo changed > /workspace/keep.txt; sleep 30")
		if r.Exit != 137 {
			t.Fatalf("ctr run: %+v, want exit 137 (killed)", r)
		}
		if got := w.content("keep.txt"); got != "original\n" {
			t.Fatalf("keep.txt = %q after the kill, want it restored", got)
		}
		if got := w.content("out.txt"); got != "<absent>" {
			t.Fatalf("out.txt = %q after the kill, want it removed (the session made it)", got)
		}
		lg := w.log()
		if lg.Verdict == "CLEAN" || !lg.Exit.KilledByKlock || lg.Container.ID != "kc-ctd-kill" {
			t.Fatalf("log: verdict %s, exit %+v, container %+v", lg.Verdict, lg.Exit, lg.Container)
		}
		harness.AssertContainerLogged(t, lg, "/workspace/keep.txt", filepath.Join(w.work, "keep.txt"))
	})
}
