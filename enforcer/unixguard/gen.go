//go:build linux

package unixguard

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type ug_event -type ug_session -type klsm_key -type klsm_rule unixguard ../../bpf/unixguard.bpf.c -- -I../../bpf/include
