//go:build tools

// Package tools pins dependencies that later capabilities import, so that
// parallel work never has to edit go.mod. Remove an entry once real code
// imports it.
package tools

import (
	_ "github.com/cilium/ebpf"
	_ "github.com/containerd/cgroups/v3/cgroup2"
	_ "github.com/elastic/go-seccomp-bpf"
	_ "github.com/landlock-lsm/go-landlock/landlock"
	_ "golang.org/x/sys/unix"
)
