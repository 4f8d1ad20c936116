//go:build linux

package container

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/klocklabs/klock/test/internal/ctrtest"
)

// TestRuncExecWalled: a process exec'd into a container klock-runtime
// prepared goes through klock-stage2 as the entrypoint did, both as runc
// exec ID CMD and as exec --process FILE (what podman, containerd and
// Docker run): no_new_privs and klock's seccomp filter stacked on the
// container's own (two filters, not one), no capabilities, root's uid
// made nobody's; a write outside the manifest's
// scope is refused, the session killed (the sleeping init too) and the
// workdir restored.
func TestRuncExecWalled(t *testing.T) {
	w := newWorld(t)
	// /scratch: a directory the agent may write by its mode, which the
	// manifest does not name: only the Landlock wall refuses it.
	scratch := filepath.Join(filepath.Dir(w.work), "scratch")
	if err := os.Mkdir(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(scratch, 0o777)
	b := ctrtest.NewBundle(t, ctrtest.BundleOptions{Args: []string{"sleep", "30"},
		Annotations: map[string]string{"io.klock.manifest": w.manifest()},
		Binds:       []ctrtest.Bind{{Host: w.work, Container: "/workspace"}, {Host: scratch, Container: "/scratch"}}})
	c := ctrtest.Create(t, w.runtime, b, "kc-exec")
	c.Start()

	// exec --process FILE, as the engines run it (a Process of their own:
	// root's uid, a capability, no no_new_privs): nobody, none, set.
	pf := filepath.Join(t.TempDir(), "process.json")
	proc := specs.Process{Args: []string{"grep", "-E", "^(Uid|NoNewPrivs|Seccomp_filters|CapEff):", "/proc/self/status"},
		Cwd: "/", Env: []string{"PATH=/bin"}, User: specs.User{UID: 0, GID: 0},
		Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_KILL"}, Effective: []string{"CAP_KILL"}, Permitted: []string{"CAP_KILL"}}}
	data, _ := json.Marshal(proc)
	if err := os.WriteFile(pf, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := c.Cmd("exec", "--process", pf, c.ID)
	status := strings.Join(strings.Fields(r.Stdout), " ")
	if r.Exit != 0 || status != "Uid: 65534 65534 65534 65534 CapEff: 0000000000000000 NoNewPrivs: 1 Seccomp_filters: 2" {
		t.Fatalf("exec --process: %+v (status %q), want uid 65534, no capabilities, no_new_privs and two seccomp filters: stage 2 ran", r, status)
	}
	// runc exec ID CMD...: the same.
	r = c.Cmd("exec", c.ID, "grep", "-E", "^(NoNewPrivs|Seccomp_filters):", "/proc/self/status")
	if status := strings.Join(strings.Fields(r.Stdout), " "); r.Exit != 0 || status != "NoNewPrivs: 1 Seccomp_filters: 2" {
		c.Wait()
		c.Delete()
		vb, _ := json.MarshalIndent(w.log().Violations, "", " ")
		t.Fatalf("exec ID CMD: %+v, want no_new_privs and two seccomp filters: stage 2 ran; violations %s", r, vb)
	}
	if got := w.content("keep.txt"); got != "original\n" {
		t.Fatalf("keep.txt = %q before the write", got)
	}

	// A write the wall refuses (EACCES), after one the manifest declares.
	r = c.Cmd("exec", c.ID, "sh", "-c", "echo declared > /workspace/out.txt && echo x > /scratch/f")
	// sh says "Permission denied" unless the session's kill (on the
	// refusal) comes first: exit 137.
	if r.Exit == 0 || r.Exit != 137 && !strings.Contains(r.Stderr, "Permission denied") {
		t.Fatalf("exec of a write outside the manifest: %+v, want it refused by the wall (EACCES)", r)
	}
	if _, err := os.Stat(filepath.Join(scratch, "f")); err == nil {
		t.Fatalf("/scratch/f was written")
	}
	if res := c.Wait(); res.Exit != 137 {
		t.Fatalf("the container's init: %+v, want exit 137 (the session killed)", res)
	}
	c.Delete()
	if got := w.content("keep.txt"); got != "original\n" {
		t.Fatalf("keep.txt = %q, want it as it was", got)
	}
	if got := w.content("out.txt"); got != "<absent>" {
		t.Fatalf("out.txt = %q after the kill, want it removed (the session made it)", got)
	}
	lg := w.log()
	if lg.Verdict == "CLEAN" || !lg.Exit.KilledByKlock {
		t.Fatalf("log: verdict %s, exit %+v, violations %+v", lg.Verdict, lg.Exit, lg.Violations)
	}
	refused := false
	for _, v := range lg.Violations {
		refused = refused || strings.HasSuffix(v.Triple, ":/scratch/f") && v.Blocked
	}
	if !refused {
		t.Fatalf("log: no refused write of /scratch/f: %+v", lg.Violations)
	}
	if lg.Container == nil || lg.Container.ID != "kc-exec" {
		t.Fatalf("log: container %+v", lg.Container)
	}
}

// TestRuncExecClean: an exec'd process doing what the manifest declares
// leaves the session clean: what the runtime (runc init's setup, the
// stdio it hands over) and stage 2 (reading the wall, its rules' paths)
// do before the command is theirs, not the agent's, even where the
// container's own stage 2 did the same before (the kernel's count of
// repeated opens).
func TestRuncExecClean(t *testing.T) {
	w := newWorld(t)
	b := w.bundle([]string{"sleep", "4"}, map[string]string{"io.klock.manifest": w.manifest()})
	c := ctrtest.Create(t, w.runtime, b, "kc-exec-clean")
	c.Start()
	for _, args := range [][]string{{"true"}, {"sh", "-c", "echo declared > /workspace/out.txt"}} {
		if r := c.Cmd(append([]string{"exec", c.ID}, args...)...); r.Exit != 0 {
			t.Fatalf("exec %q: %+v", args, r)
		}
	}
	if res := c.Wait(); res.Exit != 0 {
		t.Fatalf("the container's init: %+v, want exit 0 (not killed)", res)
	}
	c.Delete()
	if got := w.content("out.txt"); got != "declared\n" {
		t.Fatalf("out.txt = %q", got)
	}
	if lg := w.log(); lg.Verdict != "CLEAN" || lg.Exit.KilledByKlock {
		t.Fatalf("log: verdict %s, exit %+v, violations %+v", lg.Verdict, lg.Exit, lg.Violations)
	}
}
