//go:build linux

package detect

import (
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

// On any host klock supports, the core mechanisms must probe as available;
// BPF LSM may or may not, but its check must either work or say why and how.
func TestProbes(t *testing.T) {
	testutil.RequirePrivileged(t)
	r := All()
	for _, c := range r.Checks {
		if c.OK {
			continue
		}
		if c.Why == "" || c.Fix == "" {
			t.Errorf("%s unavailable without a reason and a fix: %+v", c.Name, c)
		}
		if c.Used {
			t.Errorf("%s is required by klock run but unavailable: %s", c.Name, c.Why)
		}
	}
	if !r.Strict {
		t.Fatalf("strict mode not ready on the test host: %s", r.StrictWhy)
	}
}

// klock doctor lists pathname AF_UNIX sockets with what each backend
// guarantees for them, and what klock run gets: blocked before the effect
// where bpf-lsm or the cgroup AF_UNIX hooks work (both probed), detected
// only otherwise.
func TestUnixSockets(t *testing.T) {
	testutil.RequirePrivileged(t)
	r := All()
	var c *Check
	for i := range r.Checks {
		if r.Checks[i].Name == "unix-sockets" {
			c = &r.Checks[i]
		}
	}
	if c == nil {
		t.Fatalf("no unix-sockets check in %+v", r.Checks)
	}
	for _, want := range []string{"pathname AF_UNIX", "bpf-lsm", "Landlock", "cgroup", "tracepoints detect"} {
		if !strings.Contains(c.Detail, want) {
			t.Errorf("detail %q does not say %q", c.Detail, want)
		}
	}
	hooks := UnixHooks() == nil
	switch {
	case r.FileWall == "bpf-lsm":
		if c.Guarantee != Blocks || !strings.HasSuffix(c.Detail, "klock run: bpf-lsm") {
			t.Errorf("bpf-lsm host: %+v", c)
		}
	case hooks:
		if c.Guarantee != Blocks || !strings.Contains(c.Detail, "klock run: the cgroup AF_UNIX hooks") {
			t.Errorf("host with cgroup AF_UNIX hooks: %+v", c)
		}
	default:
		if c.Guarantee != Detects || !strings.Contains(c.Detail, "detected only") {
			t.Errorf("host without either: %+v", c)
		}
	}
	if !c.OK {
		t.Errorf("the check must never stop strict mode: %+v", c)
	}
}

// TestFileClassesPerWall: doctor states, per file wall, what klock
// guarantees for metadata ioctls and executable mappings.
func TestFileClassesPerWall(t *testing.T) {
	for wall, want := range map[string][2]string{
		"bpf-lsm":  {Blocks, Blocks},
		"landlock": {Blocks + " (no MUTATES declared) or " + Detects, Detects + " (the loader's exec only)"},
	} {
		cs := fileClasses(wall)
		if len(cs) != 2 || cs[0].Name != "meta-ioctls" || cs[1].Name != "exec-maps" {
			t.Fatalf("%s: %+v", wall, cs)
		}
		for i, c := range cs {
			if c.Guarantee != want[i] || !c.OK || c.Detail == "" {
				t.Errorf("%s %s: %+v, want guarantee %q", wall, c.Name, c, want[i])
			}
		}
	}
	r := All()
	n := 0
	for _, c := range r.Checks {
		if c.Name == "meta-ioctls" || c.Name == "exec-maps" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("doctor lists %d of the two classes", n)
	}
}
