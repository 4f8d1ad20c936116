//go:build linux

package launch

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/internal/testutil"
)

// TestProbeCanariesFromOutside: the probe a hook-only container's session
// starts tries its canaries in a group with no wall at all, so each is
// let through, and in strict mode its report carries the refusal to
// start. The wall is told its pid before it joins the group, and released
// after; its canaries' files are on a tmpfs only it sees (nothing is left
// under the host's mount point). The wall-refused case runs in
// test/e2e's TestAdoptedContainer/hook and test/container's
// TestPodmanHooksD.
func TestProbeCanariesFromOutside(t *testing.T) {
	testutil.RequirePrivileged(t)
	g := newGroup(t)
	var registered int
	released := false
	c := &stage2.Canary{Dir: DefaultCanaryDir, Write: true, Exec: true, Strict: true, FileWall: "none"}
	ac, err := ProbeCanaries(context.Background(), c, nil, Probe{Group: g, Register: func(pid int) (func(), error) {
		registered = pid
		return func() { released = true }, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Report.Close()
	if registered == 0 || !released {
		t.Fatalf("registered pid %d, released %v: the wall must be told before the probe joins", registered, released)
	}
	b, err := io.ReadAll(ac.Report)
	if err != nil {
		t.Fatal(err)
	}
	ran, se, err := readStatus(b)
	if err != nil || len(ran) != 2 || se == nil || se.Step != stage2.StepCanary {
		t.Fatalf("report %q: ran %v, refusal %v, err %v; want two canaries let through and a strict refusal", b, ran, se, err)
	}
	for _, r := range ran {
		if r.Refused {
			t.Errorf("canary %s refused in a group with no wall", r)
		}
	}
	for _, name := range []string{stage2.CanaryWrite, stage2.CanaryExec} {
		if _, err := os.Lstat(filepath.Join(DefaultCanaryDir, name)); err == nil {
			t.Errorf("the probe's %s is on the host: its tmpfs must be its own", name)
		}
	}
}
