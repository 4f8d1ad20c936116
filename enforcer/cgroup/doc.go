// Package cgroup owns klock's session cgroups on the cgroup v2 hierarchy:
// finding the cgroup2 mount (from mountinfo: hosts may be hybrid, with v2 at
// /sys/fs/cgroup/unified), creating one group per session under
// <mount>/klock/, its id (the key of every per-session BPF map), an open
// directory fd for clone-into-cgroup (no start-up race), killing the whole
// tree with cgroup.kill, and removal; SweepStale removes the empty groups a
// killed klock left behind.
//
// Errors: ErrNoCgroup2 when no cgroup2 file system is mounted; other errors
// wrap the failing system call's error.
package cgroup
