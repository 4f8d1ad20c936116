//go:build linux

package stage2

import (
	"encoding/binary"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"

	"github.com/klocklabs/klock/internal/metaioctl"
	"golang.org/x/sys/unix"
)

// TestSeccompProgramShape: the filter assembles on both supported
// architectures, starts with the audit-arch check that kills a foreign ABI,
// denies every listed call, and ends by allowing the rest; io_uring is
// denied unless allowed.
func TestSeccompProgramShape(t *testing.T) {
	for _, info := range []*arch.Info{arch.X86_64, arch.AARCH64} {
		for _, uring := range []bool{false, true} {
			prog, err := seccompProgramFor(info, filterOptions{allowIOURing: uring})
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

// runFilter interprets prog (the subset of classic BPF the filter uses) on
// a seccomp_data for syscall nr with argument 1 = arg1.
func runFilter(t *testing.T, prog []unix.SockFilter, auditArch, nr, arg1 uint32) uint32 {
	t.Helper()
	data := make([]byte, 64)
	le := binary.LittleEndian
	le.PutUint32(data[offNr:], nr)
	le.PutUint32(data[offArch:], auditArch)
	le.PutUint32(data[offArg1:], arg1)
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case bpfLdAbsW:
			a = le.Uint32(data[in.K:])
		case bpfJeq:
			if a == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case bpfJge:
			if a >= in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case bpfJset:
			if a&in.K != 0 {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case bpfRet:
			return in.K
		default:
			t.Fatalf("instruction %+v at %d", in, pc)
		}
	}
	t.Fatal("the filter ran off its end")
	return 0
}

// TestSeccompMetaIoctls: with denyMetaIoctls every metadata ioctl, its
// 32-bit form included, fails with EPERM and other ioctls pass; without,
// only TIOCSTI fails; file_setattr fails with ENOSYS either way.
func TestSeccompMetaIoctls(t *testing.T) {
	for _, info := range []*arch.Info{arch.X86_64, arch.AARCH64} {
		ioctl := uint32(info.SyscallNames["ioctl"])
		for _, deny := range []bool{false, true} {
			prog, err := seccompProgramFor(info, filterOptions{denyMetaIoctls: deny})
			if err != nil {
				t.Fatal(err)
			}
			run := func(nr, cmd uint32) uint32 { return runFilter(t, prog, uint32(info.ID), nr, cmd) }
			for _, m := range metaioctl.List {
				want := uint32(retAllow)
				if deny {
					want = retErrno | uint32(unix.EPERM)
				}
				if got := run(ioctl, m.Cmd); got != want {
					t.Errorf("%s deny=%v: ioctl %s -> %#x, want %#x", info.Name, deny, m.Name, got, want)
				}
				// The same number as another syscall's argument is nothing.
				if got := run(uint32(info.SyscallNames["read"]), m.Cmd); got != retAllow {
					t.Errorf("%s: read with %s as its fd -> %#x", info.Name, m.Name, got)
				}
			}
			for _, cmd := range []uint32{unix.TCGETS, unix.TIOCGWINSZ, 0x541b /* FIONREAD */, uint32(unix.FS_IOC_GETFLAGS), 0x801c581f /* FS_IOC_FSGETXATTR */} {
				if got := run(ioctl, cmd); got != retAllow {
					t.Errorf("%s deny=%v: ioctl %#x -> %#x, want allowed", info.Name, deny, cmd, got)
				}
			}
			if got := run(ioctl, unix.TIOCSTI); got != retErrno|uint32(unix.EPERM) {
				t.Errorf("%s: TIOCSTI -> %#x", info.Name, got)
			}
			if got := run(nrFileSetattr, 0); got != retErrno|uint32(unix.ENOSYS) {
				t.Errorf("%s: file_setattr -> %#x, want ENOSYS", info.Name, got)
			}
			if got := run(uint32(info.SyscallNames["clone"]), 0); got != retAllow {
				t.Errorf("%s: clone -> %#x", info.Name, got)
			}
		}
	}
}

// TestDeniedSyscallsMatchFilter: every name DeniedSyscalls exports (what
// enforcer/oci merges into a container's profile) is one the filter fails
// with EPERM, and it lists all of them: the two cannot drift apart.
func TestDeniedSyscallsMatchFilter(t *testing.T) {
	info := arch.X86_64
	prog, err := seccompProgramFor(info, filterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A holds the syscall number after "ld nr" and an argument after any
	// other load: only the comparisons against the number count.
	denied := map[uint32]bool{}
	aIsNr := false
	for i := 0; i+1 < len(prog); i++ {
		if prog[i].Code == bpfLdAbsW {
			aIsNr = prog[i].K == offNr
		}
		if aIsNr && prog[i].Code == bpfJeq && prog[i].Jf == 1 && prog[i+1] == (unix.SockFilter{Code: bpfRet, K: retErrno | uint32(unix.EPERM)}) {
			denied[prog[i].K] = true
		}
	}
	names := DeniedSyscalls()
	for _, n := range names {
		if !denied[uint32(info.SyscallNames[n])] {
			t.Errorf("%s is exported but not denied", n)
		}
	}
	if len(names) != len(denied) {
		t.Errorf("%d names exported, %d syscalls denied whole", len(names), len(denied))
	}
	names[0] = "changed"
	if DeniedSyscalls()[0] == "changed" {
		t.Error("DeniedSyscalls shares its slice")
	}
}

// TestSeccompTrapConnect: with the connect trap, connect returns
// SECCOMP_RET_USER_NOTIF on both architectures, an x32 connect still
// fails with ENOSYS and a foreign arch's is killed (no ABI goes around
// the trap), and other calls are as without it; without, connect is
// allowed.
func TestSeccompTrapConnect(t *testing.T) {
	for _, info := range []*arch.Info{arch.X86_64, arch.AARCH64} {
		connect := uint32(info.SyscallNames["connect"])
		for _, trap := range []bool{false, true} {
			prog, err := seccompProgramFor(info, filterOptions{trapConnect: trap})
			if err != nil {
				t.Fatal(err)
			}
			want := uint32(retAllow)
			if trap {
				want = retUserNotif
			}
			if got := runFilter(t, prog, uint32(info.ID), connect, 0); got != want {
				t.Errorf("%s trap=%v: connect -> %#x, want %#x", info.Name, trap, got, want)
			}
			if got := runFilter(t, prog, uint32(info.ID), uint32(info.SyscallNames["sendto"]), 0); got != retAllow {
				t.Errorf("%s trap=%v: sendto -> %#x", info.Name, trap, got)
			}
			if got := runFilter(t, prog, uint32(info.ID), uint32(info.SyscallNames["bpf"]), 0); got != retErrno|uint32(unix.EPERM) {
				t.Errorf("%s trap=%v: bpf -> %#x", info.Name, trap, got)
			}
			if got := runFilter(t, prog, 0x40000003 /* AUDIT_ARCH_I386 */, 362, 0); got != retKillProcess {
				t.Errorf("%s trap=%v: i386 connect -> %#x, want kill", info.Name, trap, got)
			}
			if info.ID == arch.X86_64.ID {
				if got := runFilter(t, prog, uint32(info.ID), 0x40000000|connect, 0); got != retErrno|uint32(unix.ENOSYS) {
					t.Errorf("trap=%v: x32 connect -> %#x, want ENOSYS", trap, got)
				}
			}
		}
	}
}
