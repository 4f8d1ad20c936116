//go:build linux

package lsm

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"github.com/klocklabs/klock/enforcer/detect"
	"github.com/klocklabs/klock/internal/testutil"
)

func TestEventHeaderMatchesTheKernelLayout(t *testing.T) {
	if off := unsafe.Offsetof(lsmKlsmEvent{}.Data); off != hdrSize {
		t.Fatalf("offsetof(klsm_event, data) = %d, decode assumes %d", off, hdrSize)
	}
}

// On a kernel where the doctor's probe says BPF LSM works, Load must load
// and attach every program; where it does not (this repository's CI host),
// Load must refuse with ErrLoad rather than pretend. The VM harness forces
// the first case (KLOCK_TEST_BACKEND=bpf-lsm).
func TestLoadMatchesTheProbe(t *testing.T) {
	testutil.RequirePrivileged(t)
	probe := detect.BPFLSM()
	l, err := Load()
	if os.Getenv("KLOCK_TEST_BACKEND") == "bpf-lsm" && !probe.OK {
		t.Fatalf("bpf-lsm forced but the probe fails: %s", probe.Why)
	}
	if probe.OK {
		if err != nil {
			t.Fatalf("probe passed but Load failed: %+v", err)
		}
		l.Close()
		return
	}
	if err == nil {
		l.Close()
		t.Fatalf("probe failed (%s) but Load succeeded", probe.Why)
	}
	if !errors.Is(err, ErrLoad) {
		t.Fatalf("Load error %v is not ErrLoad", err)
	}
}
