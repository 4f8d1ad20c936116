// Package perf measures what klock costs an agent, as ratios against the
// same workload without klock, in the same run (make bench): an open/close
// loop, a real file workload (untar, find, grep -r over a 10k-file tree, also
// under strace -f for comparison), and the latency klock run adds to
// /bin/true. The workloads time themselves from inside, so session set-up
// and tear-down are measured separately from the work.
package perf
