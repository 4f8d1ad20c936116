//go:build linux

package perf

import (
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	klsm "github.com/klocklabs/klock/enforcer/lsm"
)

// The floor: the kernel mechanisms a backend is built on, with programs
// that do nothing. Each hook klock's backend uses gets a program that
// returns 0 at once (allow; no map, no helper), attached while the
// session's walls (underWalls) run the same workload. What that costs over
// the workload without klock is what any program on those hooks pays
// before doing any work: the tracepoints' slow syscall path on the host,
// the LSM hooks' BPF trampolines in the VM. A ratio goal below the floor
// cannot be reached by making klock's programs cheaper.

// tracepointHooks are the BTF tracepoints the observer attaches per file
// operation (enforcer/observe): every syscall's exit and the ctime
// updates it pairs with a syscall's object, where the kernel has them.
var tracepointHooks = []string{"sys_exit", "inode_set_ctime_to_ts", "ctime_ns_xchg", "ctime_xchg_skip"}

// attachFloor attaches a do-nothing program to each hook of the backend
// under test (KLOCK_TEST_BACKEND=bpf-lsm: the LSM hooks; else the
// tracepoints) and returns what detaches them.
func attachFloor(b *testing.B) func() {
	if err := rlimit.RemoveMemlock(); err != nil {
		b.Fatal(err)
	}
	spec := func(hook string) *ebpf.ProgramSpec {
		return &ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: hook,
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}, License: "GPL"}
	}
	hooks := tracepointHooks
	lsm := os.Getenv("KLOCK_TEST_BACKEND") == "bpf-lsm"
	if lsm {
		var err error
		if hooks, err = klsm.Hooks(); err != nil {
			b.Fatal(err)
		}
	}
	var links []link.Link
	var progs []*ebpf.Program
	detach := func() {
		for _, l := range links {
			l.Close()
		}
		for _, p := range progs {
			p.Close()
		}
	}
	for _, hook := range hooks {
		s := spec(hook)
		if lsm {
			s.Type, s.AttachType = ebpf.LSM, ebpf.AttachLSMMac
		}
		p, err := ebpf.NewProgram(s)
		if err != nil {
			if !lsm && hook != "sys_exit" {
				continue // a ctime tracepoint this kernel lacks (before 6.13): the observer skips it too
			}
			detach()
			b.Fatalf("floor program for %s: %v", hook, err)
		}
		progs = append(progs, p)
		var l link.Link
		if lsm {
			l, err = link.AttachLSM(link.LSMOptions{Program: p})
		} else {
			l, err = link.AttachTracing(link.TracingOptions{Program: p})
		}
		if err != nil {
			detach()
			b.Fatalf("attach floor program to %s: %v", hook, err)
		}
		links = append(links, l)
	}
	return detach
}

// underFloor runs argv behind the session's walls with the floor attached.
func underFloor(b *testing.B, f func()) {
	detach := attachFloor(b)
	defer detach()
	f()
}
