// Package kbtf shares the decoded kernel BTF between the BPF loads of one
// process. Every collection load (the observer's core and each optional
// program, the network guard, bpf-lsm) relocates against the kernel's
// types; without a shared cache each one decodes /sys/kernel/btf/vmlinux
// again, tens of milliseconds each, on a session's start-up path.
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
