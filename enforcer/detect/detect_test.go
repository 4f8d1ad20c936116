//go:build linux

package detect

import (
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

// TestFileClassesPerWall: doctor states, per file wall, what klock
// guarantees for metadata ioctls and executable mappings (issue 19).
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
