//go:build linux

package stage2

import (
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"
)

// TestSeccompProgramShape: the filter assembles on both supported
// architectures, starts with the audit-arch check that kills a foreign ABI,
// denies every listed call, and ends by allowing the rest; io_uring is
// denied unless allowed.
func TestSeccompProgramShape(t *testing.T) {
	for _, info := range []*arch.Info{arch.X86_64, arch.AARCH64} {
		for _, uring := range []bool{false, true} {
			prog, err := seccompProgramFor(info, uring)
			if err != nil {
				t.Fatalf("%s: %v", info.Name, err)
			}
			if prog[0] != (unix.SockFilter{Code: bpfLdAbsW, K: offArch}) || prog[1].K != uint32(info.ID) || prog[2] != (unix.SockFilter{Code: bpfRet, K: retKillProcess}) {
				t.Errorf("%s: program does not begin with the arch check: %+v", info.Name, prog[:3])
			}
			if last := prog[len(prog)-1]; last != (unix.SockFilter{Code: bpfRet, K: retAllow}) {
				t.Errorf("%s: last instruction %+v", info.Name, last)
			}
			denied := map[uint32]bool{}
			for i := 0; i+1 < len(prog); i++ {
				if prog[i].Code == bpfJeq && prog[i].Jf == 1 && prog[i+1] == (unix.SockFilter{Code: bpfRet, K: retErrno | uint32(unix.EPERM)}) {
					denied[prog[i].K] = true
				}
			}
			for _, name := range append([]string{"bpf", "ptrace", "mount", "kexec_load", "init_module"}, ioURingSyscalls...) {
				want := !(uring && name[:3] == "io_")
				if nr := uint32(info.SyscallNames[name]); denied[nr] != want {
					t.Errorf("%s io_uring=%v: %s denied=%v, want %v", info.Name, uring, name, denied[nr], want)
				}
			}
		}
	}
}
