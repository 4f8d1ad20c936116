//go:build linux

package container

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestDocker: dockerd with a "klock" runtime (daemon.json runtimes: the
// wrapper script as its path, --klock-config=FILE as its runtimeArgs, a
// runtime.yaml mapping the test's manifest to every container id, since
// Docker 20.10's API has no annotations and labels never reach the spec),
// on an image imported from a tarball: the declared write goes through with
// a CLEAN log; the undeclared one kills the container (docker reports 137),
// the workdir is restored byte for byte and the log names both paths.
func TestDocker(t *testing.T) {
	w := newWorld(t)
	m := w.manifest()
	cfg := filepath.Join(filepath.Dir(w.work), "runtime.yaml")
	yaml := fmt.Sprintf("manifests:\n  - match: {id: \"*\"}\n    manifest: %s\n", m)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	d := ctrtest.Docker(t, map[string]ctrtest.DockerRuntime{
		"klock": {Path: w.runtime, Args: []string{"--klock-config=" + cfg}},
	})
	img := d.Import(busyboxTar(t), busyboxImage)
	// run runs script in a container and returns its full id (--cidfile):
	// the OCI container id, the one the log names.
	run := func(script string) (ctrtest.Result, string) {
		cid := filepath.Join(t.TempDir(), "cid")
		r := d.Run("--runtime", "klock", "--cidfile", cid, "--network", "none", "-v", w.work+":/workspace", img, "sh", "-c", script)
		b, _ := os.ReadFile(cid)
		return r, string(b)
	}

	t.Run("DeclaredWrite", func(t *testing.T) {
		r, id := run("id -u; echo declared > /workspace/out.txt")
		if r.Exit != 0 || r.Stdout != "65534\n" {
			t.Fatalf("docker run: %+v (want exit 0, uid 65534: the rewritten spec's user)", r)
		}
		if got := w.content("out.txt"); got != "declared\n" {
			t.Fatalf("out.txt = %q", got)
		}
		lg := w.log()
		if lg.Verdict != "CLEAN" || lg.Container == nil || lg.Container.ID != id || lg.Container.Mode != "runtime" {
			t.Fatalf("log: verdict %s, container %+v, violations %+v", lg.Verdict, lg.Container, lg.Violations)
		}
	})
	os.RemoveAll(filepath.Join(w.work, ".klock", "sessions"))
	os.Remove(filepath.Join(w.work, "out.txt"))

	t.Run("StrictKill", func(t *testing.T) {
		r, id := run("echo declared > /workspace/out.txt; echo changed > /workspace/keep.txt; sleep 30")
		if r.Exit != 137 {
			t.Fatalf("docker run: %+v, want exit 137 (killed)", r)
		}
		if got := w.content("keep.txt"); got != "original\n" {
			t.Fatalf("keep.txt = %q after the kill, want it restored", got)
		}
		if got := w.content("out.txt"); got != "<absent>" {
			t.Fatalf("out.txt = %q after the kill, want it removed (the session made it)", got)
		}
		lg := w.log()
		if lg.Verdict == "CLEAN" || !lg.Exit.KilledByKlock || lg.Container == nil || lg.Container.ID != id {
			t.Fatalf("log: verdict %s, exit %+v, container %+v", lg.Verdict, lg.Exit, lg.Container)
		}
		harness.AssertContainerLogged(t, lg, "/workspace/keep.txt", filepath.Join(w.work, "keep.txt"))
	})
}
