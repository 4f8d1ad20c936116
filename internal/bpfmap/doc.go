// Package bpfmap holds the small helpers klock's BPF backends share for
// per-session state in maps shared by every session (keyed, among other
// things, by the session's cgroup id).
//
// # Errors
//
// Owned and DeleteOwned return the map read's error (with what was read
// before it); entries DeleteOwned could not delete are left (a later session's key differs in its cgroup id, so a
// leftover never answers for it, it only takes room).
package bpfmap
