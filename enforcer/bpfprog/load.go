//go:build linux

package bpfprog

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/kbtf"
)

// Load lifts the memlock limit (kernels before 5.11 charge BPF memory
// against it) and runs load, a bpf2go loader or a spec's LoadAndAssign,
// with klock's kernel BTF cache: the kernel's BTF is parsed once per
// process, not once per backend. Errors wrap sentinel.
func Load(sentinel error, load func(*ebpf.CollectionOptions) error) error {
	if err := Memlock(sentinel); err != nil {
		return err
	}
	if err := load(&ebpf.CollectionOptions{Cache: kbtf.Cache()}); err != nil {
		return LoadError(sentinel, err)
	}
	return nil
}

// LoadError wraps a collection's load error in sentinel, with the
// verifier's whole log when the verifier refused a program (%+v), and, for
// EPERM from an LSM program's load, the likely cause: bpf missing from the
// kernel's lsm= boot list.
func LoadError(sentinel, err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("%w: verifier: %+v", sentinel, ve)
	}
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w: %w (the kernel refused to load the programs: run as root; BPF LSM programs also need bpf in the lsm= boot list; klock doctor says why)", sentinel, err)
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}

// Memlock lifts the memlock limit for a backend that loads in steps of its
// own (observe: maps first, then each program against them).
func Memlock(sentinel error) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("%w: remove memlock limit: %w", sentinel, err)
	}
	return nil
}
