#!/usr/bin/env bash
# Boots a Debian kernel under qemu and runs klock's kernel suites there, with
# one file wall forced: bpf-lsm (bpf in the boot line's lsm=) or Landlock
# (bpf left out, as most production kernels boot). The suites: the enforcer
# tests, the end-to-end and escape suites, and `klock doctor`, whose JSON is
# compared with the kernel's fixture (vmtests/doctor/).
#
# Usage: vmtests/vmtest.sh [go test package patterns...]
#        vmtests/vmtest.sh --fetch-only   only download and unpack the kernel
#        vmtests/vmtest.sh --bench [packages...]
#            benchmarks in the VM: by default test/perf's ratios against no
#            enforcement and enforcer/lsm's split of the hooks' cost
#   KLOCK_VM_KERNEL     the Debian package whose kernel boots (default
#                       linux-image-amd64, Debian 12's 6.1; also
#                       linux-image-6.12-amd64, linux-image-6.12-cloud-amd64)
#   KLOCK_VM_WALL       bpf-lsm (default) or landlock
#   KLOCK_VM_BENCH      the benchmarks' -test.bench pattern (default Ratio|HookCost)
#   KLOCK_VM_BENCHTIME  their -test.benchtime (default 3x)
#   KLOCK_VM_RUN    run only the tests this -test.run pattern selects, verbosely
#   KLOCK_VM_CACHE  where kernel packages are kept (default ~/.cache/klock-vm)
#   KLOCK_VM_TCG_THREAD  qemu's TCG threading, multi (default) or single
#                   (vmtests/matrix.sh says which kernels need single)
#   KLOCK_VM_SMP    vCPUs (default: the host's, at most 4)
#   KLOCK_VM_MEM    memory in MiB (default 3072)
#   KLOCK_VM_CONSOLE  where the whole console is kept (default
#                   bin/vm-console.log; vmtests/matrix.sh gives each boot
#                   its own, as it runs some side by side)
# The verdict is read from the serial console, never from qemu's exit code.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh vm
meta=${KLOCK_VM_KERNEL:-linux-image-amd64}
wall=${KLOCK_VM_WALL:-bpf-lsm}
case $wall in
bpf-lsm) lsm=lockdown,capability,landlock,bpf ;;
landlock) lsm=lockdown,capability,landlock ;;
*) echo "vmtest: KLOCK_VM_WALL is bpf-lsm or landlock, not $wall" >&2; exit 2 ;;
esac
cache=${KLOCK_VM_CACHE:-$HOME/.cache/klock-vm}/$meta
mkdir -p "$cache"

# The kernel: the image package the meta-package depends on (BTF, and
# CONFIG_BPF_LSM=y on Debian's), unpacked once and kept.
if ! ls "$cache"/boot/vmlinuz-* >/dev/null 2>&1; then
	pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image/{print $2; exit}')
	if [ -z "$pkg" ]; then
		apt-get update -qq >/dev/null
		pkg=$(apt-cache depends "$meta" | awk '/Depends: linux-image/{print $2; exit}')
	fi
	[ -n "$pkg" ] || { echo "vmtest: no kernel package for $meta in the apt sources" >&2; exit 1; }
	echo "vmtest: downloading $pkg (apt)" >&2
	(cd "$cache" && apt-get download -qq "$pkg" >/dev/null) || { apt-get update -qq >/dev/null; (cd "$cache" && apt-get download -qq "$pkg"); }
	dpkg-deb -x "$cache"/"$pkg"_*.deb "$cache"
	rm -f "$cache"/*.deb
fi
kernel=$(ls "$cache"/boot/vmlinuz-* | head -1)
[ "${1:-}" != --fetch-only ] || exit 0
release=${kernel##*/vmlinuz-}

work=$(mktemp -d /tmp/klock-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
# A usrmerged Debian-like root: the host's own dynamically linked tools
# (with their libraries and ELF interpreter, so exec rules meet a real
# ld.so), and busybox for everything else the init needs.
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,proc,sys,dev,tmp,run,etc,root,t}
for d in bin sbin lib lib64; do ln -s usr/$d "$root/$d"; done
cp /bin/busybox "$root/usr/bin/busybox"
tools="dash true false id cat wc tee tar setsid rm rmdir mkfifo mkdir grep find date sleep env ls ln chmod touch mv cp stat head"
for tool in $tools; do
	src=$(type -P "$tool") || continue
	cp -L "$src" "$root/usr/bin/$tool"
	for lib in $(ldd "$src" 2>/dev/null | grep -o '/[^ ]*'); do
		[ -e "$root$lib" ] || cp -L --parents "$lib" "$root"
	done
done
ln -s dash "$root/usr/bin/sh"
# The real-workload suite (test/realworld) runs the host's git and
# python3 (venv, pip, pytest) in the guest, each with its libraries, its
# helpers and its standard library; only the workloads these make
# possible run there (toolchains too large for a RAM root stay on the
# host: node, gcc, go).
copy_elf() { # copy_elf FILE...: the libraries each dynamically linked file needs
	local f lib
	for f in "$@"; do
		for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*'); do
			[ -e "$root$lib" ] || cp -L --parents "$lib" "$root"
		done
	done
}
case " $* " in
*" ./test/realworld "*)
	for d in /usr/lib/git-core /usr/share/git-core /usr/lib/python3 /usr/share/python-wheels \
		"$(readlink -f /usr/bin/python3 | sed 's,/bin/,/lib/,')"; do
		mkdir -p "$root${d%/*}" && cp -a "$d" "$root${d%/*}/"
	done
	cp -L /usr/bin/git /usr/bin/python3 "$root/usr/bin/"
	copy_elf /usr/bin/git /usr/bin/python3 $(find /usr/lib/git-core "$root/usr/lib" -name '*.so*' -o -perm -u+x -type f 2>/dev/null | grep -v "^$root/usr/lib/x86_64-linux-gnu")
	;;
esac
for app in $("$root/usr/bin/busybox" --list); do
	[ -e "$root/usr/bin/$app" ] || ln -s busybox "$root/usr/bin/$app"
done
# Kernel modules for a RAM disk with an ext2 file system (mounted by the
# ext4 driver): the tests' /tmp then has user xattrs, which a 6.1 tmpfs
# lacks, and is a real disk file system like the ones agents work on.
kmod=$(ls -d "$cache"/lib/modules/* | head -1)
mods=()
want_mod() { # want_mod NAME [optional]: NAME and what it depends on, dependencies first
	local ko dep
	ko=$(find "$kmod" \( -name "$1.ko" -o -name "$1.ko.xz" -o -name "$1.ko.zst" \) | head -1)
	if [ -z "$ko" ]; then
		# Built into this kernel's image (ext4 on the cloud flavour), or
		# merged into another module on this kernel (optional).
		grep -q "/$1\.ko\$" "$kmod/modules.builtin" && return 0
		[ "${2:-}" = optional ] && return 0
		echo "vmtest: module $1 not in the kernel package" >&2
		exit 1
	fi
	case " ${mods[*]} " in *" $1 "*) return 0 ;; esac
	mkdir -p "$root/mod"
	# busybox insmod takes plain modules: 6.12's packages compress them.
	case $ko in
	*.xz) xz -dc "$ko" >"$root/mod/$1.ko" ;;
	*.zst) zstd -qdc "$ko" >"$root/mod/$1.ko" ;;
	*) cp "$ko" "$root/mod/$1.ko" ;;
	esac
	for dep in $(strings "$root/mod/$1.ko" | sed -n 's/^depends=//p' | tr , ' '); do want_mod "$dep"; done
	case " ${mods[*]} " in *" $1 "*) ;; *) mods+=("$1") ;; esac
}
want_mod brd
want_mod crc32c_generic
want_mod ext4
# The packet wall of sessions with NET intents (enforcer/netwall): veth,
# nf_tables (inet), conntrack state, masquerade, named quota and objects.
for m in veth nf_tables nft_ct nft_chain_nat nft_masq nft_quota; do want_mod $m; done
want_mod nft_objref optional # part of nf_tables since 6.x
# sock_diag for TCP: the loopback relay counts a handed-over socket's
# bytes from its destroy notification (the VM has no modprobe to load
# them on demand, as a host does).
want_mod inet_diag
want_mod tcp_diag
printf '%s\n' "${mods[@]}" >"$root/mod/order"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
echo "$wall" >"$root/wall"
cp vmtests/init "$root/init"

bench=0
if [ "${1:-}" = --bench ]; then
	bench=1
	shift
	[ $# -gt 0 ] || set -- ./test/perf ./enforcer/lsm
fi
pkgs=("$@")
if [ ${#pkgs[@]} = 0 ]; then
	pkgs=(./enforcer/detect ./enforcer/daemon ./enforcer/netwall ./enforcer/dnsproxy ./test/e2e ./test/escape)
	# bpf-lsm's own tests need it on the boot line.
	[ "$wall" = landlock ] || pkgs=(./enforcer/lsm "${pkgs[@]}")
fi
echo "vmtest: building static test binaries: ${pkgs[*]}" >&2
for p in "${pkgs[@]}"; do
	name=$(echo "${p#./}" | tr / -)
	CGO_ENABLED=0 go test -c -o "$root/t/$name.test" "$p"
	if [ -n "${KLOCK_VM_RUN:-}" ] && [ $bench = 0 ]; then
		echo "-test.run=$KLOCK_VM_RUN -test.v" >"$root/t/$name.args"
		touch "$root/t/$name.print" # the whole verbose output
	elif [ $bench = 0 ] && [ "$p" = ./test/realworld ]; then
		echo '-test.run=^TestRealWorld$ -realworld.only=shell,git,python' >"$root/t/$name.args"
	elif [ $bench = 0 ]; then
		# The guest has no container runtime (runc): the rows that need
		# one run on the host (TestAdoptedContainer covers the adopted
		# container path here).
		echo "-test.skip=^TestEscapesInContainer\$" >"$root/t/$name.args"
	fi
done
# The build whose walls enforce nothing (internal/brokenwall): its own
# binary, running only the test that proves the canaries catch it.
case " ${pkgs[*]} " in
*" ./test/e2e "*)
	if [ $bench = 0 ] && [ -z "${KLOCK_VM_RUN:-}" ]; then
		CGO_ENABLED=0 go test -c -tags klocktest_brokenwall -o "$root/t/test-e2e-brokenwall.test" ./test/e2e
		echo "-test.run=^(TestCanariesCatchABrokenWall|TestAdoptedCanariesCatchABrokenWall)\$" >"$root/t/test-e2e-brokenwall.args"
	fi
	;;
esac
if [ $bench = 1 ]; then
	# Benchmarks only, every figure printed (the VM's one vCPU per thread
	# under TCG is slow: compare the ratios, not the absolute times).
	for p in "${pkgs[@]}"; do
		name=$(echo "${p#./}" | tr / -)
		echo "-test.run=^\$ -test.bench=${KLOCK_VM_BENCH:-Ratio|HookCost} -test.benchtime=${KLOCK_VM_BENCHTIME:-3x} -test.timeout=40m" >"$root/t/$name.args"
		touch "$root/t/$name.print"
	done
fi
mkdir -p "$root/var/tmp" && chmod 1777 "$root/var/tmp"
CGO_ENABLED=0 go build -o "$root/bin/klock" ./cmd/klock
CGO_ENABLED=0 go build -o "$root/bin/klock-cli" ./cmd/klock-cli
# Its session launcher, beside it as make build puts it.
CGO_ENABLED=0 go build -o "$root/bin/klock-stage2" ./cmd/klock-stage2
# klockd, for the suites that run real klock and klockd processes
# (KLOCK_BIN in init: the VM has no Go toolchain to build them).
CGO_ENABLED=0 go build -o "$root/bin/klockd" ./cmd/klockd
# klock doctor must find the forced wall, and print its JSON for the
# fixture comparison below.
cat >"$root/t/doctor.cmd" <<DOC
/bin/klock doctor
echo KLOCK-VM-DOCTOR-BEGIN; /bin/klock doctor --json; echo KLOCK-VM-DOCTOR-END
/bin/klock doctor --json | tr -d ' \n' | grep -q '"file_wall":"$wall"'
DOC

# Extra command files (KLOCK_VM_CMDS=dir: every *.cmd in it runs as a suite).
if [ -n "${KLOCK_VM_CMDS:-}" ]; then cp "$KLOCK_VM_CMDS"/*.cmd "$root/t/"; fi
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"
smp=${KLOCK_VM_SMP:-$(nproc)}
[ "$smp" -gt 4 ] && smp=4
echo "vmtest: booting $release under qemu (TCG, $smp vCPUs), $wall forced" >&2
start=$(date +%s)
timeout --foreground 45m qemu-system-x86_64 -accel tcg,thread=${KLOCK_VM_TCG_THREAD:-multi} -cpu max -smp "$smp" -m "${KLOCK_VM_MEM:-3072}" \
	-nographic -no-reboot -kernel "$kernel" -initrd "$work/initrd.gz" \
	-append "console=ttyS0 quiet panic=-1 lsm=$lsm" </dev/null | tee "$work/console.log" | grep --line-buffered -E 'KLOCK-VM|--- FAIL|_test.go:[0-9]+:|^\s+(ok|FAIL)|panic|klock doctor|bpf-lsm|landlock|tracepoints|^Benchmark|^goos|^cpu' || true
echo "vmtest: VM ran $(( $(date +%s) - start ))s" >&2
console=${KLOCK_VM_CONSOLE:-bin/vm-console.log}
mkdir -p "$(dirname "$console")" && cp "$work/console.log" "$console"
verdict=FAIL
grep -q 'KLOCK-VM-RESULT PASS' "$work/console.log" && verdict=PASS
if ! grep -q 'KLOCK-VM-RESULT' "$work/console.log"; then
	echo "vmtest: no verdict on the console (the VM crashed or timed out); last lines:" >&2
	tail -30 "$work/console.log" >&2
fi
# What klock enforces on this kernel under this wall, as klock doctor says
# it, is pinned (host state an earlier suite changed, ip_forward, is left
# out): a change is a reviewed diff of the fixture, never a
# surprise (KLOCK_VM_UPDATE_FIXTURES=1 writes the new one).
if [ $bench = 0 ] && [ -z "${KLOCK_VM_RUN:-}" ] && [ $verdict = PASS ]; then
	fixture=vmtests/doctor/$meta.$wall.json
	got=$work/doctor.json
	sed -n '/^KLOCK-VM-DOCTOR-BEGIN/,/^KLOCK-VM-DOCTOR-END/p' "$work/console.log" | sed '1d;$d' | tr -d '\r' |
		jq -S '{file_wall, strict_ready, checks: [.checks[] | {name, ok, guarantee, used_by_klock_run, why,
			detail: (if .name == "launcher" or .name == "oci-runtime" then null
				elif .detail == null then null
				else .detail | sub("; net.ipv4.ip_forward is off: [^;]*"; "") end)}]}' >"$got" || verdict=FAIL
	if [ "${KLOCK_VM_UPDATE_FIXTURES:-}" = 1 ]; then
		mkdir -p vmtests/doctor && cp "$got" "$fixture"
		echo "vmtest: wrote $fixture"
	elif ! diff -u "$fixture" "$got"; then
		echo "vmtest: klock doctor on $release ($wall) differs from $fixture (above): review it, and if the change is right, KLOCK_VM_UPDATE_FIXTURES=1 KLOCK_VM_KERNEL=$meta KLOCK_VM_WALL=$wall vmtests/vmtest.sh" >&2
		verdict=FAIL
	fi
fi
echo "KLOCK-VM-BOOT $release $wall $verdict $(( $(date +%s) - start ))s" | tee -a "$console"
if [ $verdict = PASS ]; then
	echo "vmtest: PASS"
	exit 0
fi
echo "vmtest: FAIL (the whole console is in $console)" >&2
exit 1
