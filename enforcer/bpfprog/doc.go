// Package bpfprog owns the lifecycle klock's BPF backends share
// (enforcer/lsm, netguard, unixguard, observe), so each keeps only what is
// its own: its programs, its maps' layout, its records' decoding and where
// they go.
//
//   - Load lifts the memlock limit and loads a bpf2go collection with
//     klock's kernel BTF cache (internal/kbtf); LoadError says why a load
//     failed, the verifier's log included, and what to check when the
//     kernel refused BPF LSM programs.
//   - Ring is one ring buffer read by one goroutine in order, with Sync
//     (internal/ringsync: every record the kernel wrote before the call is
//     handed on), periodic work beside it (Every: a poll of the kernel's
//     loss counters), and Close in the one safe order: stop the
//     goroutines, then the reader; the caller closes its objects after.
//   - Losses counts one session's records that could not be handed on
//     (its channel full, or dropped in the kernel: the per-session counter
//     a program keeps) and delivers the count without ever blocking the
//     reader.
//
// # Errors
//
// Load and OpenRing wrap the caller's sentinel (ErrLoad of the backend)
// with %w, so callers keep matching their own sentinel with errors.Is.
// Ring.Close returns the reader's close error.
package bpfprog
