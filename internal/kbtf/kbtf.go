// Package kbtf shares the decoded kernel BTF between the BPF loads of one
// process. The observer's programs (tp_btf attach targets, the
// bpf_rdonly_cast kfunc, CO-RE relocations), bpf-lsm's and the bpf-lsm
// trial all need the kernel's types; without a shared cache each load
// decodes /sys/kernel/btf/vmlinux again, tens of milliseconds each, on a
// session's start-up path. (The network guard's cgroup programs need none.)
//
// The decode is not persisted between processes: cilium/ebpf looks attach
// targets and kfuncs up in the whole of vmlinux whatever
// ProgramOptions.KernelTypes says, and bpf_core_type_id_kernel relocations
// need vmlinux's own type ids, which a reduced copy renumbers (the verifier
// then refuses the program, or worse, accepts a cast to another type). A
// process only overlaps the decode with the work that needs none (Warm).
package kbtf

import (
	"sync"
	"weak"

	"github.com/cilium/ebpf/btf"
)

var (
	mu  sync.Mutex
	cur weak.Pointer[btf.Cache]
)

// Warm returns Cache() after starting the decode of the kernel's types in
// the background, so that a load can do what needs no kernel BTF (parse
// its object, create its maps) meanwhile. The goroutine holds the cache
// until the decode is done; a load that needs the types waits for the
// same decode (btf.Cache decodes once).
func Warm() *btf.Cache {
	c := Cache()
	go func() { _, _ = c.Kernel() }()
	return c
}

// Cache returns the cache the loads running now share. It is held only
// weakly: once no load holds it, the garbage collector may free the
// decoded types (tens of megabytes), so a long-lived klockd does not keep
// them after its start-up loads. Hold the result for the whole load.
func Cache() *btf.Cache {
	mu.Lock()
	defer mu.Unlock()
	if c := cur.Value(); c != nil {
		return c
	}
	c := btf.NewCache()
	cur = weak.Make(c)
	return c
}
