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
# With more than one lane (KLOCK_VM_LANES, default: the host's CPUs),
# every boot runs under one TCG thread, so on one host CPU, and up to
# that many boots run side by side, each into its own
# bin/vm-output.KERNEL.WALL.log, printed when it ends: on two CPUs this
# is about a fifth quicker than one boot at a time with every CPU. With
# one lane, boots run one at a time, multi-threaded where the kernel
# allows it.
set -uo pipefail
cd "$(dirname "$0")/.."
# What make test proves on every run: Debian 12's 6.1, 6.12 (backports)
# and 6.12's cloud flavour (another kernel config), each under both walls,
# every suite in each, the real workloads (git, pip, pytest, the shell
# tools) among them. The longest boots come first, so that the lanes end
# together.
ROWS=(
	linux-image-amd64:bpf-lsm:./enforcer/lsm,./enforcer/detect,./enforcer/daemon,./enforcer/netwall,./enforcer/dnsproxy,./test/e2e,./test/escape,./test/realworld
	linux-image-amd64:landlock:./enforcer/detect,./enforcer/daemon,./enforcer/netwall,./enforcer/dnsproxy,./test/e2e,./test/escape,./test/realworld
	linux-image-6.12-amd64:bpf-lsm:./enforcer/lsm,./enforcer/detect,./enforcer/daemon,./enforcer/netwall,./enforcer/dnsproxy,./test/e2e,./test/escape,./test/realworld
	linux-image-6.12-cloud-amd64:bpf-lsm:./enforcer/lsm,./enforcer/detect,./enforcer/daemon,./enforcer/netwall,./enforcer/dnsproxy,./test/e2e,./test/escape,./test/realworld
	linux-image-6.12-amd64:landlock:./enforcer/detect,./enforcer/daemon,./enforcer/netwall,./enforcer/dnsproxy,./test/e2e,./test/escape,./test/realworld
	linux-image-6.12-cloud-amd64:landlock:./enforcer/detect,./enforcer/daemon,./enforcer/netwall,./enforcer/dnsproxy,./test/e2e,./test/escape,./test/realworld
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
# Side by side (more than one lane), every boot takes one TCG thread.
tcg_threads() {
	[ "$lanes" -gt 1 ] && { echo single; return; }
	case $1 in *6.12*) echo single ;; *) echo multi ;; esac
}

# boot ROW: one vmtest.sh boot; its console goes to
# bin/vm-console.KERNEL.WALL.log and its suite lines to the summary.
#
# A boot whose guest kernel crashed (an Oops or a panic on the console)
# is booted once more, and the summary says so (KLOCK-VM-RETRY, with the
# crash's first line; its console is kept as ....crashed.log): Debian's
# 6.12 under TCG has double-faulted in kernel code that differs each time
# (the BPF verifier's mark_reg_read, nf_tables' netlink dump), after every
# suite before it passed. A crash that comes back fails the row.
boot() {
	local kernel wall pkglist console pkgs=() rc attempt crash
	IFS=: read -r kernel wall pkglist <<<"$1"
	[ -z "$pkglist" ] || IFS=, read -r -a pkgs <<<"$pkglist"
	console=bin/vm-console.$kernel.$wall.log
	for attempt in 1 2; do
		rm -f "$console"
		KLOCK_VM_KERNEL=$kernel KLOCK_VM_WALL=$wall KLOCK_VM_TCG_THREAD=$(tcg_threads "$kernel") \
			KLOCK_VM_CONSOLE=$console vmtests/vmtest.sh "${pkgs[@]}"
		rc=$?
		crash=$(grep -a -m1 -E 'Oops: |Kernel panic - not syncing' "$console" 2>/dev/null)
		[ "$rc" != 0 ] && [ -n "$crash" ] && [ "$attempt" = 1 ] || break
		mv "$console" "${console%.log}.crashed.log"
		echo "KLOCK-VM-RETRY $kernel $wall: the guest kernel crashed (${crash#*] }), booted again; console in ${console%.log}.crashed.log" |
			tee -a "$summary" >&2
	done
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
