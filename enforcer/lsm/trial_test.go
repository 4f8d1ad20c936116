//go:build linux

package lsm

import (
	"errors"
	"os"
	"path/filepath"
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

// TestLSMListed: a kernel whose active LSMs leave bpf out is no place for
// bpf-lsm, even where its programs load and attach (they would never
// run); one that lists it, or a host without securityfs, leaves the
// decision to the load.
func TestLSMListed(t *testing.T) {
	dir := t.TempDir()
	for list, wantErr := range map[string]bool{
		"lockdown,capability,landlock\n":     true,
		"lockdown,capability,landlock,bpf\n": false,
		"bpf":                                false,
		"capability,bpfx":                    true,
	} {
		p := filepath.Join(dir, "lsm")
		if err := os.WriteFile(p, []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
		err := lsmListed(p)
		if (err != nil) != wantErr || err != nil && !errors.Is(err, ErrLoad) {
			t.Errorf("%q: %v, want an ErrLoad: %v", list, err, wantErr)
		}
	}
	if err := lsmListed(filepath.Join(dir, "absent")); err != nil {
		t.Errorf("no securityfs: %v, want the load to decide", err)
	}
}
