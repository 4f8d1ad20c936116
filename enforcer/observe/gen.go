package observe

// The BPF object is generated from bpf/observe.bpf.c (needs clang and
// bpf/include/vmlinux.h from scripts/gen-vmlinux.sh); the output is committed
// so `go build` needs neither.
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type obs_rec -type obs_session -type obs_seen_key -type obs_scope_key -type obs_subtree observe ../../bpf/observe.bpf.c -- -I../../bpf/include
