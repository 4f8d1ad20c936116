//go:build linux

package lsm

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// dentryArgs are the BPF constants that say where an inode_* hook takes its
// dentry, by the hook's BTF name. Linux 6.3 put a struct mnt_idmap * first
// in inode_setattr; reading the running kernel's BTF (feature probing, not
// a version check) keeps one object correct on both sides.
var dentryArgs = map[string]string{
	"bpf_lsm_inode_setattr":     "setattr_dentry_arg",
	"bpf_lsm_inode_setxattr":    "setxattr_dentry_arg",
	"bpf_lsm_inode_removexattr": "removexattr_dentry_arg",
}

// setDentryArgs sets those constants in spec from the kernel's BTF.
func setDentryArgs(spec *ebpf.CollectionSpec) error {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("kernel BTF: %w", err)
	}
	for hook, variable := range dentryArgs {
		var fn *btf.Func
		if err := kernel.TypeByName(hook, &fn); err != nil {
			return fmt.Errorf("%s: %w", hook, err)
		}
		proto, ok := fn.Type.(*btf.FuncProto)
		if !ok {
			return fmt.Errorf("%s: no prototype", hook)
		}
		pos := -1
		for i, p := range proto.Params {
			if ptr, ok := btf.UnderlyingType(p.Type).(*btf.Pointer); ok {
				if st, ok := btf.UnderlyingType(ptr.Target).(*btf.Struct); ok && st.Name == "dentry" {
					pos = i
					break
				}
			}
		}
		// lsm.bpf.c reads the dentry from argument 0 or 1.
		if pos != 0 && pos != 1 {
			return fmt.Errorf("%s takes its dentry as argument %d; this klock knows arguments 0 and 1", hook, pos)
		}
		v, ok := spec.Variables[variable]
		if !ok {
			return fmt.Errorf("BPF object has no %s", variable)
		}
		if err := v.Set(uint32(pos)); err != nil {
			return fmt.Errorf("set %s: %w", variable, err)
		}
	}
	return nil
}
