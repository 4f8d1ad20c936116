//go:build linux && (amd64 || arm64)

package observe

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/internal/testutil"
)

func TestSmoke(t *testing.T) {
	testutil.RequirePrivileged(t)
	o, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	g, err := cgroup.Create("obs-smoke")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Delete()
	w, err := o.Watch(g.ID)
	if err != nil {
		t.Fatal(err)
	}
	fd, _ := g.OpenFD()
	cmd := exec.Command("/bin/sh", "-c", os.Getenv("SMOKE_CMD"))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	out, err := cmd.CombinedOutput()
	t.Logf("out=%s err=%v", out, err)
	o.Sync(context.Background())
	o.Unwatch(g.ID)
	for r := range w.Records() {
		t.Logf("%s %s %s pid=%d comm=%s errno=%d blocked=%v extra=%s path=%s arg=%q", r.Kind, r.Event.Syscall, r.Event.Triple, r.Event.PID, r.Event.Comm, r.Event.Errno, r.Event.Blocked, r.Event.Extra, r.Path, r.Arg)
	}
	n, _ := o.LostTotal()
	t.Logf("lost %d", n)
}
