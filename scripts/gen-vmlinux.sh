#!/usr/bin/env bash
# Writes bpf/include/vmlinux.h from the running kernel's BTF (CO-RE: the
# generated objects relocate onto other kernels, the VM's 6.1 included).
# Not committed: only `make generate` needs it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh bpf
out=bpf/include/vmlinux.h
[ -s "$out" ] && exit 0
bpftool btf dump file /sys/kernel/btf/vmlinux format c > "$out.tmp"
mv "$out.tmp" "$out"
