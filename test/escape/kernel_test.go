//go:build linux

package escape

import (
	"os"

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
// ctime tracepoints the observer names a path-based metadata change's
// inode with (before 6.13: its BTF has no inode_set_ctime_to_ts), else nil.
func withoutCtimeHooks(o row) func() *row {
	return func() *row {
		if harness.LSM() || harness.CtimeHooks() {
			return nil
		}
		return &o
	}
}
