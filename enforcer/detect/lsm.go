//go:build linux

package detect

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// BPFLSM loads a trivial lsm/file_open program that counts its calls,
// attaches it, opens a file and checks the counter moved: the only honest
// test that BPF LSM programs work here (the LSM list can name "bpf" while
// trampolines are unavailable, and then loading fails with EPERM).
func BPFLSM() Check {
	c := Check{Name: "bpf-lsm", Guarantee: Blocks}
	if !needRoot(&c) {
		return c
	}
	lsms, _ := os.ReadFile("/sys/kernel/security/lsm")
	listed := strings.Contains(","+string(lsms)+",", ",bpf,")
	fires, err := probeLSM()
	switch {
	case err != nil:
		c.Why = err.Error()
		if listed {
			c.Why += " (\"bpf\" is in the LSM list, but programs cannot load or attach: BPF trampolines are unavailable on this kernel/VM)"
		}
		c.Fix = "boot a kernel with CONFIG_BPF_LSM=y, BTF and working BPF trampolines, with bpf in lsm= (e.g. lsm=lockdown,capability,landlock,bpf); klock then uses Landlock + tracepoints until then"
	case !fires:
		c.Why = "an lsm/file_open program attached but never ran"
		c.Fix = "add bpf to the kernel's lsm= boot parameter"
	default:
		c.OK, c.Detail = true, "lsm/file_open loaded, attached and fired"
	}
	return c
}

func probeLSM() (bool, error) {
	// Lift the memlock limit first, so a failure names the real cause.
	if err := rlimit.RemoveMemlock(); err != nil {
		return false, fmt.Errorf("remove memlock limit: %w", err)
	}
	counter, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return false, fmt.Errorf("create map: %w", err)
	}
	defer counter.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:       ebpf.LSM,
		AttachType: ebpf.AttachLSMMac,
		AttachTo:   "file_open",
		License:    "GPL",
		Instructions: asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, counter.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	})
	if errors.Is(err, unix.EPERM) {
		// cilium/ebpf suggests MEMLOCK for any EPERM; it was lifted above.
		return false, fmt.Errorf("load lsm/file_open: %w", unix.EPERM)
	}
	if err != nil {
		return false, fmt.Errorf("load lsm/file_open: %w", err)
	}
	defer prog.Close()
	l, err := link.AttachLSM(link.LSMOptions{Program: prog})
	if err != nil {
		return false, fmt.Errorf("attach lsm/file_open: %w", err)
	}
	defer l.Close()
	f, err := os.Open("/proc/self/stat")
	if err == nil {
		f.Close()
	}
	var n uint64
	if err := counter.Lookup(uint32(0), &n); err != nil {
		return false, err
	}
	return n > 0, nil
}
