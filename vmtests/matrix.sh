#!/usr/bin/env bash
# Runs klock's kernel suites on the kernels it is proven on, under each
# file wall: bpf-lsm forced (bpf in lsm=), or Landlock forced (bpf left
# out, as most production kernels boot). Every boot goes on when one
# fails; the summary lists each suite's line and each boot's, and the exit
# status is non-zero when any failed.
#
# Usage: vmtests/matrix.sh            the rows make test runs (ROWS below)
#        vmtests/matrix.sh --all      every kernel and wall, every suite
#                                     (6.12 and 6.12-cloud under both walls)
#        vmtests/matrix.sh ROW...     rows of your own: KERNEL:WALL[:pkg,pkg]
#   e.g. vmtests/matrix.sh linux-image-6.12-amd64:landlock:./test/e2e
# A row without packages runs vmtest.sh's defaults for its wall.
set -uo pipefail
cd "$(dirname "$0")/.."
# What make test proves on every run: Debian 12's 6.1 under both walls,
# every suite; 6.12's bpf-lsm programs (its verifier checks more).
ROWS=(
	linux-image-amd64:bpf-lsm
	linux-image-amd64:landlock
	linux-image-6.12-amd64:bpf-lsm:./enforcer/lsm,./enforcer/detect
)
ALL=(
	linux-image-amd64:bpf-lsm linux-image-amd64:landlock
	linux-image-6.12-amd64:bpf-lsm linux-image-6.12-amd64:landlock
	linux-image-6.12-cloud-amd64:bpf-lsm linux-image-6.12-cloud-amd64:landlock
)
case "${1:-}" in
"") runs=("${ROWS[@]}") ;;
--all) runs=("${ALL[@]}") ;;
*) runs=("$@") ;;
esac
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
fail=0
for run in "${runs[@]}"; do
	IFS=: read -r kernel wall pkglist <<<"$run"
	pkgs=()
	[ -z "$pkglist" ] || IFS=, read -r -a pkgs <<<"$pkglist"
	# 6.12 under multi-threaded TCG: a CPU can run a stale translation of
	# kernel text patched with int3 when a tracepoint is switched on
	# ("Oops: int3" in syscall_exit_to_user_mode_prepare); one TCG
	# thread keeps every vCPU coherent (slower, never wrong).
	tcg=multi
	case $kernel in *6.12*) tcg=single ;; esac
	echo "== $kernel, $wall forced${pkglist:+: $pkglist}" >&2
	rm -f bin/vm-console.log
	KLOCK_VM_KERNEL=$kernel KLOCK_VM_WALL=$wall KLOCK_VM_TCG_THREAD=$tcg vmtests/vmtest.sh "${pkgs[@]}" || fail=1
	grep -h -E '^KLOCK-VM-(SUITE|CMD|BOOT)' bin/vm-console.log >>"$summary" 2>/dev/null ||
		echo "KLOCK-VM-BOOT $kernel $wall FAIL (it never booted: see above)" >>"$summary"
	cp bin/vm-console.log "bin/vm-console.$kernel.$wall.log" 2>/dev/null || true
done
echo "== VM matrix summary" >&2
cat "$summary" >&2
exit $fail
