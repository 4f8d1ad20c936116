//go:build linux

package netguard

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type ng_event -type ng_policy -type ng_rule netguard ../../bpf/netguard.bpf.c -- -I../../bpf/include
