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
