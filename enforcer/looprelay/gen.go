//go:build linux

package looprelay

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type lr_flow looprelay ../../bpf/looprelay.bpf.c -- -I../../bpf/include
