//go:build linux

package container

import (
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/test/internal/ctrtest"
)

// TestKillByContainerID: klockd lists a container's session with its
// container id (klock ps), and klock kill takes that id: the container is
// killed, its workdir rolled back, its log says why.
func TestKillByContainerID(t *testing.T) {
	w := newWorld(t)
	b := w.bundle([]string{"sh", "-c", "echo declared > /workspace/out.txt; sleep 30"}, map[string]string{"io.klock.manifest": w.manifest()})
	c := ctrtest.Create(t, w.runtime, b, "kc-ops")
	c.Start()
	cl, err := daemon.Dial(w.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	list, err := cl.PS()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Container != "kc-ops" {
		t.Fatalf("klock ps: %+v, want the container's session named by its id", list)
	}
	if err := cl.Kill("kc-ops"); err != nil {
		t.Fatalf("klock kill kc-ops: %v", err)
	}
	if r := c.Wait(); r.Exit != 137 {
		t.Fatalf("container after klock kill: %+v, want 137", r)
	}
	c.Delete()
	lg := w.log()
	if !lg.Exit.KilledByKlock || w.content("out.txt") != "<absent>" {
		t.Fatalf("log exit %+v, out.txt %q: want killed by klock and rolled back", lg.Exit, w.content("out.txt"))
	}
	for _, op := range lg.Rollback {
		if op.ContainerPath == "/workspace/out.txt" && op.Path == filepath.Join(w.work, "out.txt") && op.OK {
			return
		}
	}
	t.Fatalf("no rollback of out.txt naming both paths: %+v", lg.Rollback)
}
