//go:build linux

package metrics

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/klocklabs/klock/internal/testutil"
)

// With the statistics on, the collector reports a real program's runs
// as the kernel counted them: five test runs are five runs, and the run
// time is there. A closed program is left out, not an error.
func TestBPFStats(t *testing.T) {
	testutil.RequirePrivileged(t)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	m := New()
	stats, err := m.EnableBPFStats(func() map[string]map[string]*ebpf.Program {
		return map[string]map[string]*ebpf.Program{"test": {"ret0": prog}}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	for range 5 {
		if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 64)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := series(t, m, `klock_bpf_program_runs_total{backend="test",program="ret0"}`); got != 5 {
		t.Errorf("runs %v, want 5", got)
	}
	if got := series(t, m, `klock_bpf_program_run_seconds_total{backend="test",program="ret0"}`); got <= 0 {
		t.Errorf("run time %v", got)
	}
	prog.Close()
	if got := series(t, m, `klock_bpf_program_runs_total{backend="test",program="ret0"}`); got != 0 {
		t.Errorf("a closed program reported %v runs", got)
	}
}
