//go:build linux

package escape

import (
	"os"
	"testing"

	"github.com/klocklabs/klock/policy"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/test/internal/harness"
)

// landlockBelow is o where the session's wall is Landlock at an ABI below
// abi (the right the row relies on came later), else nil.
func landlockBelow(abi int, o row) func() *row {
	return func() *row {
		if harness.LSM() {
			return nil
		}
		if got, err := launch.ProbeABI(); err == nil && got < abi {
			return &o
		}
		return nil
	}
}

// withoutMemfdNoexec is o on a kernel without vm.memfd_noexec (before
// 6.3, as the session's wall probes it: the sysctl's file), else nil;
// landlockOnly: only under the Landlock wall (bpf-lsm decides the row
// alike on every kernel).
func withoutMemfdNoexec(landlockOnly bool, o row) func() *row {
	return func() *row {
		if landlockOnly && harness.LSM() {
			return nil
		}
		if _, err := os.Stat("/proc/sys/vm/memfd_noexec"); err != nil {
			return &o
		}
		return nil
	}
}

// withoutCtimeHooks is o under the Landlock wall on a kernel without the
// ctime tracepoints (before 6.13), else nil.
func withoutCtimeHooks(o row) func() *row {
	return func() *row {
		if harness.LSM() || harness.CtimeTracepoints() {
			return nil
		}
		return &o
	}
}

// chmoddedUnattributed is chmodded for a kernel that cannot name a
// chmod's inode: a strict kill for the violation itself (klock resolved
// the link before the swap) restores the file; a kill because the name
// could not be verified cannot say which file to restore, and the mode
// stays changed: detected and killed, not undone (the note on kernels
// before 6.13 in enforcer/observe's doc).
func chmoddedUnattributed(p func(e *env) string) func(*testing.T, *env, *harness.Outcome) {
	restored := chmodded(p)
	return func(t *testing.T, e *env, o *harness.Outcome) {
		t.Helper()
		if o.Log.Mode == policy.ModeStrict && o.Violation("MUTATES FILE:"+p(e)) == nil {
			if !o.Res.Killed {
				t.Errorf("strict session not killed\n%s", o.Dump())
			}
			return
		}
		restored(t, e, o)
	}
}
