//go:build linux

package lsm

import (
	"errors"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

// TestLSMTrialNeverSkipsAWorkingLoad: the trial may only refuse where the
// real bpf-lsm load fails too; otherwise BackendAuto would drop a wall the
// kernel offers.
func TestLSMTrialNeverSkipsAWorkingLoad(t *testing.T) {
	testutil.RequirePrivileged(t)
	trial := Loadable()
	l, err := Load()
	if err == nil {
		l.Close()
	}
	if trial != nil && err == nil {
		t.Fatalf("the trial refused (%v) but bpf-lsm loads", trial)
	}
	if trial != nil && !errors.Is(trial, ErrLoad) {
		t.Fatalf("the trial's refusal %v is not an ErrLoad", trial)
	}
	t.Logf("trial: %v; load: %v", trial, err)
}
