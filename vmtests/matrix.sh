#!/usr/bin/env bash
# Runs klock's kernel suites on every kernel it is proven on, under each
# file wall: Debian 12's 6.1, the 6.12 line (Debian's backports; Ubuntu's
# HWE kernels are close), and 6.12's cloud flavour (another kernel config,
# as cloud images boot), each with bpf-lsm forced and with Landlock forced
# (bpf left out of lsm=, as most production kernels boot). Every boot goes
# on when one fails; the summary lists each suite's line and each boot's,
# and the exit status is non-zero when any failed.
#
# Usage: vmtests/matrix.sh [KERNEL:WALL ...]   (default: the whole matrix)
#   e.g. vmtests/matrix.sh linux-image-6.12-amd64:landlock
# The first boot runs every suite (klockd's too); the others the suites
# whose behaviour depends on the kernel: bpf-lsm's own (bpf-lsm boots),
# detect, e2e (DNS included) and escape.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=("$@")
if [ ${#runs[@]} = 0 ]; then
	runs=(linux-image-amd64:bpf-lsm linux-image-amd64:landlock
		linux-image-6.12-amd64:bpf-lsm linux-image-6.12-amd64:landlock
		linux-image-6.12-cloud-amd64:bpf-lsm linux-image-6.12-cloud-amd64:landlock)
fi
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
fail=0
first=1
for run in "${runs[@]}"; do
	kernel=${run%%:*} wall=${run#*:}
	pkgs=()
	if [ $first = 0 ]; then
		pkgs=(./enforcer/detect ./test/e2e ./test/escape)
		[ "$wall" = landlock ] || pkgs=(./enforcer/lsm "${pkgs[@]}")
	fi
	first=0
	echo "== $kernel, $wall forced" >&2
	rm -f bin/vm-console.log
	if ! KLOCK_VM_KERNEL=$kernel KLOCK_VM_WALL=$wall vmtests/vmtest.sh "${pkgs[@]}"; then
		fail=1
	fi
	grep -h -E '^KLOCK-VM-(SUITE|CMD|BOOT)' bin/vm-console.log >>"$summary" 2>/dev/null ||
		echo "KLOCK-VM-BOOT $kernel $wall FAIL (it never booted: see above)" >>"$summary"
	cp bin/vm-console.log "bin/vm-console.$kernel.$wall.log" 2>/dev/null || true
done
echo "== VM matrix summary" >&2
cat "$summary" >&2
exit $fail
