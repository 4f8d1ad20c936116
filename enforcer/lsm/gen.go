package lsm

// The BPF object is generated from bpf/lsm.bpf.c (needs clang and
// bpf/include/vmlinux.h from scripts/gen-vmlinux.sh); the output is committed
// so `go build` needs neither.
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type klsm_event -type klsm_session -type klsm_key -type klsm_rule -type klsm_created -type klsm_seen_key lsm ../../bpf/lsm.bpf.c -- -I../../bpf/include
