package testutil

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// RingWriter is a real BPF program for tests of ring buffer readers: a
// socket filter that writes one 8-byte record, 42, to ring each time it is
// run (prog.Run, BPF_PROG_TEST_RUN, with any 14-byte packet). Closed when
// the test ends.
func RingWriter(t testing.TB, ring *ebpf.Map) *ebpf.Program {
	t.Helper()
	return RingWriterFlags(t, ring, 0)
}

// RingWriterFlags is RingWriter writing with bpf_ringbuf_output's flags
// (1, BPF_RB_NO_WAKEUP: a record that wakes no reader, as klock's
// programs write allowed operations below their wakeup threshold).
func RingWriterFlags(t testing.TB, ring *ebpf.Map, flags int64) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Imm(asm.R1, 42),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, ring.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Imm(asm.R3, 8),
		asm.Mov.Imm(asm.R4, int32(flags)),
		asm.FnRingbufOutput.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}
