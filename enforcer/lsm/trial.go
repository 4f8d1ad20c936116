//go:build linux

package lsm

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/klocklabs/klock/enforcer/bpfprog"
	"github.com/klocklabs/klock/internal/kbtf"
	"golang.org/x/sys/unix"
)

// Loadable says, once per process, whether this kernel lets any BPF-LSM
// program load. Where it does not (no bpf in lsm=, no trampolines: most
// hosts), the embedded path learns it from a two-instruction program
// instead of parsing and loading all of bpf-lsm's maps and programs only
// to fail, which costs a session tens of milliseconds. A kernel that
// accepts the trial still gets the real load, which alone decides whether
// bpf-lsm is used; the trial can only skip a load bound to fail the same
// way. It shares the kernel BTF the concurrent loads decode (kbtf).
var Loadable = sync.OnceValue(func() error {
	if err := lsmListed(securityLSM); err != nil {
		return err
	}
	// Without it an old kernel's memlock limit would also say EPERM.
	if err := bpfprog.Memlock(ErrLoad); err != nil {
		return nil
	}
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"trial": {
		Name:       "klock_lsm_trial",
		Type:       ebpf.LSM,
		AttachType: ebpf.AttachLSMMac,
		AttachTo:   "file_open",
		License:    "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	}}}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Cache: kbtf.Cache()})
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w: a trial lsm/file_open program cannot load: %w (BPF LSM programs cannot load on this kernel: is bpf in the lsm= boot list? klock doctor says why)", ErrLoad, unix.EPERM)
	}
	if err != nil {
		// Not the known refusal: let the real load try and say why.
		return nil
	}
	coll.Close()
	return nil
})

// securityLSM is the kernel's list of active LSMs (securityfs).
const securityLSM = "/sys/kernel/security/lsm"

// lsmListed fails when the kernel's active LSMs, as securityfs lists them,
// do not include bpf. BPF-LSM programs then load and attach on some
// kernels (6.1 among them) and never run: a wall that refuses nothing.
// Where securityfs is not mounted, the load decides (and the session's
// canaries prove the wall before the agent runs).
func lsmListed(list string) error {
	b, err := os.ReadFile(list)
	if err != nil {
		return nil
	}
	if !slices.Contains(strings.Split(strings.TrimSpace(string(b)), ","), "bpf") {
		return fmt.Errorf("%w: bpf is not among the kernel's active LSMs (%s: %s): BPF LSM programs would attach and never run; add bpf to the lsm= boot parameter (klock doctor says why)", ErrLoad, list, strings.TrimSpace(string(b)))
	}
	return nil
}
