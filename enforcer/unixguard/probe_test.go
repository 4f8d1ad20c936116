//go:build linux

package unixguard

import (
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

// The probe loads, attaches and detaches for real; on this kernel (the
// hooks exist since 6.7) it must pass, and where it cannot, it says why.
func TestProbe(t *testing.T) {
	testutil.RequirePrivileged(t)
	if err := Probe(); err != nil {
		t.Fatalf("probe: %v", err)
	}
}
