#!/usr/bin/env bash
# Runs klock's kernel suites on the kernels it is proven on, under each
# file wall: bpf-lsm forced (bpf in lsm=), or Landlock forced (bpf left
# out, as most production kernels boot). Every boot goes on when one
# fails; the summary lists each suite's line and each boot's, and the exit
# status is non-zero when any failed.
#
# Usage: vmtests/matrix.sh            the rows make test runs (ROWS below)
#        vmtests/matrix.sh ROW...     rows of your own: KERNEL:WALL[:pkg,pkg]
#   e.g. vmtests/matrix.sh linux-image-6.12-amd64:landlock:./test/e2e
# A row without packages runs vmtest.sh's defaults for its wall.
#
# Boots under one TCG thread (6.12's, below) use one host CPU each, so
# up to KLOCK_VM_LANES of them (default: the host's CPUs) run side by
# side, each into its own bin/vm-output.KERNEL.WALL.log, printed when it
# ends; the others boot one at a time with every CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
# What make test proves on every run: Debian 12's 6.1, 6.12 (backports)
# and 6.12's cloud flavour (another kernel config), each under both walls.
# The real workloads (git, pip, pytest, shell tools) run on 6.1, the
# kernel most hosts boot and the one whose fallbacks they meet (fentry for
# pip's chmod-then-rename, no TCP or truncate rights in Landlock); on the
# others they would add about three minutes a boot.
ROWS=(
	linux-image-amd64:bpf-lsm:./enforcer/lsm,./enforcer/detect,./enforcer/daemon,./enforcer/netwall,./enforcer/dnsproxy,./test/e2e,./test/escape,./test/realworld
	linux-image-amd64:landlock:./enforcer/detect,./enforcer/daemon,./enforcer/netwall,./enforcer/dnsproxy,./test/e2e,./test/escape,./test/realworld
	linux-image-6.12-amd64:bpf-lsm
	linux-image-6.12-amd64:landlock
	linux-image-6.12-cloud-amd64:bpf-lsm
	linux-image-6.12-cloud-amd64:landlock
)
runs=("${ROWS[@]}")
[ $# = 0 ] || runs=("$@")
lanes=${KLOCK_VM_LANES:-$(nproc)}
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
fail=0

# tcg_threads KERNEL: 6.12 under multi-threaded TCG: a CPU can run a stale
# translation of kernel text patched with int3 when a tracepoint is
# switched on ("Oops: int3" in syscall_exit_to_user_mode_prepare); one
# TCG thread keeps every vCPU coherent (slower, never wrong).
tcg_threads() { case $1 in *6.12*) echo single ;; *) echo multi ;; esac; }

# boot ROW: one vmtest.sh boot; its console goes to
# bin/vm-console.KERNEL.WALL.log and its suite lines to the summary.
boot() {
	local kernel wall pkglist console pkgs=()
	IFS=: read -r kernel wall pkglist <<<"$1"
	[ -z "$pkglist" ] || IFS=, read -r -a pkgs <<<"$pkglist"
	console=bin/vm-console.$kernel.$wall.log
	rm -f "$console"
	KLOCK_VM_KERNEL=$kernel KLOCK_VM_WALL=$wall KLOCK_VM_TCG_THREAD=$(tcg_threads "$kernel") \
		KLOCK_VM_CONSOLE=$console vmtests/vmtest.sh "${pkgs[@]}"
	local rc=$?
	grep -h -E '^KLOCK-VM-(SUITE|CMD|BOOT)' "$console" >>"$summary" 2>/dev/null ||
		echo "KLOCK-VM-BOOT $kernel $wall FAIL (it never booted: see above)" >>"$summary"
	return $rc
}

mkdir -p bin
# Kernel packages first, one at a time (apt's lock), so that boots side
# by side never download.
for run in "${runs[@]}"; do
	KLOCK_VM_KERNEL=${run%%:*} vmtests/vmtest.sh --fetch-only || fail=1
done
parallel=()
for run in "${runs[@]}"; do
	if [ "$(tcg_threads "${run%%:*}")" = single ] && [ "$lanes" -gt 1 ]; then
		parallel+=("$run")
		continue
	fi
	echo "== $run" >&2
	boot "$run" || fail=1
done
# The one-thread boots, up to $lanes at a time.
declare -A running=()
# reap: waits for one boot beside the others to end, and prints its output.
reap() {
	local done_pid st r
	wait -n -p done_pid
	st=$?
	[ "$st" = 0 ] || fail=1
	r=${running[$done_pid]}
	unset "running[$done_pid]"
	echo "== $r (ended, exit $st)" >&2
	cat "bin/vm-output.${r/:/.}.log" >&2
}
for run in "${parallel[@]}"; do
	while [ ${#running[@]} -ge "$lanes" ]; do reap; done
	IFS=: read -r k w _ <<<"$run"
	echo "== $run (started beside the others)" >&2
	boot "$run" >"bin/vm-output.$k.$w.log" 2>&1 &
	running[$!]=$k:$w
done
while [ ${#running[@]} -gt 0 ]; do reap; done
echo "== VM matrix summary" >&2
cat "$summary" >&2
exit $fail
