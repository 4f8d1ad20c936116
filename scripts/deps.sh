#!/usr/bin/env bash
# Installs what klock's build, tests and demo need, only when missing.
# Usage: scripts/deps.sh [build|bpf|vm|bench|npm|agents|realworld|containers|report|ops|install|fleet|reflink|all]
#   build  Go is assumed (the module proxy serves the rest); strace, and curl
#          (the real client of the metering proxy's test)
#   bpf    clang, llvm, bpftool, libbpf headers (only for `make generate`)
#   vm     qemu, busybox, cpio (BPF-LSM VM tests)
#   bench  hyperfine, strace
#   npm    the pinned MCP servers and conformance suite in test/mcp (npm ci)
#   agents the pinned coding-agent CLIs test/agents runs under klock (Claude
#          Code, Codex, Gemini CLI; npm ci in test/agents): their native
#          binaries come as optional platform packages, which npm ci installs
#   realworld  the real toolchains test/realworld runs under klock: git, gcc,
#          make, Debian's python3 with venv, pip and pytest (node, npm and Go
#          come with the machine); test/tools' python plugins use the same
#          /usr/bin/python3
#   containers  the real container runtimes test/container drives, as root:
#          runc and crun (klock-runtime runs in front of either), podman
#          (conmon and the CNI plugins come with it; as root it needs no
#          uidmap, fuse-overlayfs, slirp4netns, netavark or catatonit),
#          containerd (and ctr), dockerd (docker.io), and
#          busybox-static, the tests' root filesystem
#   report Debian's chromium: test/e2e renders `klock log --html` headless
#          and reads the DOM the browser built (and screenshots it)
#   ops    promtool (Debian's prometheus package, without its recommends):
#          klockd's metrics test checks its /metrics with promtool check
#          metrics; the package's service is not needed and not started
#   install  what make install, make deb and test/install need: dpkg-deb
#          (dpkg), debootstrap (the test's clean Debian root), systemd
#          (systemd-analyze verify of the units) and bash-completion (the
#          test loads the completions as a user's shell does)
#   reflink  mkfs.btrfs (btrfs-progs) and mkfs.xfs (xfsprogs): the snapshot
#          tests format loop-mounted btrfs and xfs images, where backups
#          and restores are FICLONE clones, not copies
set -euo pipefail
want=()
need() { # need CMD PACKAGE
	command -v "$1" >/dev/null 2>&1 || want+=("$2")
}
case "${1:-all}" in
build) need strace strace; need curl curl ;;
bpf) need clang clang; need llvm-strip llvm; need bpftool bpftool; [ -e /usr/include/bpf/bpf_helpers.h ] || want+=(libbpf-dev) ;;
vm) need qemu-system-x86_64 qemu-system-x86; need jq jq; need xz xz-utils; need zstd zstd; need strings binutils; [ -e /bin/busybox ] || want+=(busybox-static); need cpio cpio ;;
bench) need hyperfine hyperfine; need strace strace ;;
npm)
	# node and npm come with the machine; the packages come from the
	# committed package-lock.json, exactly, and only when not yet there.
	dir="$(cd "$(dirname "$0")/../test/mcp" && pwd)"
	if [ -x "$dir/node_modules/.bin/mcp-server-filesystem" ] && [ -x "$dir/node_modules/.bin/conformance" ] &&
		[ -x "$dir/node_modules/.bin/mcp-server-everything" ] && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
		exit 0
	fi
	command -v npm >/dev/null 2>&1 || { echo "klock: npm is missing (install nodejs and npm)" >&2; exit 1; }
	echo "klock: installing the MCP test servers (npm ci in test/mcp)" >&2
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
	exit 0 ;;
agents)
	dir="$(cd "$(dirname "$0")/../test/agents" && pwd)"
	# The native binaries too: an install with optional dependencies
	# omitted leaves the launchers without them.
	if [ -x "$dir/node_modules/.bin/claude" ] && [ -x "$dir/node_modules/.bin/codex" ] &&
		[ -x "$dir/node_modules/.bin/gemini" ] && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ] &&
		compgen -G "$dir/node_modules/@anthropic-ai/claude-code-*/claude" >/dev/null &&
		compgen -G "$dir/node_modules/@openai/codex-*/vendor/*/bin/codex" >/dev/null; then
		exit 0
	fi
	command -v npm >/dev/null 2>&1 || { echo "klock: npm is missing (install nodejs and npm)" >&2; exit 1; }
	echo "klock: installing the coding-agent CLIs (npm ci in test/agents)" >&2
	# --include=optional: the CLIs' native binaries are optional platform
	# dependencies (a global omit=optional would leave only their stubs).
	(cd "$dir" && npm ci --include=optional --no-audit --no-fund --loglevel=error >/dev/null)
	exit 0 ;;
realworld)
	need git git; need gcc gcc; need make make; need tar tar; need xargs findutils
	# Debian's own python3 (/usr/bin/python3, whatever else is on PATH): the
	# venv module with ensurepip's wheels, pip, and pytest for the system site.
	[ -x /usr/bin/python3 ] || want+=(python3)
	/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || want+=(python3-venv)
	/usr/bin/python3 -m pip --version >/dev/null 2>&1 || want+=(python3-pip)
	/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || want+=(python3-pytest) ;;
containers)
	need runc runc; need crun crun; need podman podman; need conmon conmon
	[ -x /usr/lib/cni/bridge ] || want+=(containernetworking-plugins)
	need containerd containerd; need ctr containerd; need dockerd docker.io
	[ -e /bin/busybox ] || want+=(busybox-static) ;;
report) need chromium chromium ;;
ops) need promtool prometheus ;;
install)
	need dpkg-deb dpkg; need debootstrap debootstrap; need systemd-analyze systemd
	[ -e /usr/share/bash-completion/bash_completion ] || want+=(bash-completion) ;;
fleet)
	# The etcd server for the fleet lease store's tests (etcdtest starts
	# its own members on loopback; the packaged service is not wanted).
	need etcd etcd-server ;;
reflink) need mkfs.btrfs btrfs-progs; need mkfs.xfs xfsprogs ;;
all) "$0" build; "$0" bpf; "$0" vm; "$0" bench; "$0" npm; "$0" agents; "$0" realworld; "$0" containers; "$0" report; "$0" ops; "$0" install; "$0" fleet; "$0" reflink; exit 0 ;;
*) echo "usage: $0 [build|bpf|vm|bench|npm|agents|realworld|containers|report|ops|install|fleet|reflink|all]" >&2; exit 2 ;;
esac
[ ${#want[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "klock: missing packages: ${want[*]}; run as root or: sudo apt-get install -y ${want[*]}" >&2
	exit 1
fi
echo "klock: installing ${want[*]} (apt)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
if [ "${1:-all}" = fleet ]; then
	# The package starts etcd as a service where systemd runs: stop it, the
	# tests run their own clusters.
	systemctl disable --now etcd >/dev/null 2>&1 || true
fi
