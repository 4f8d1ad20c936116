// Package container runs klock's container path end to end with real
// runtimes: klock-runtime in place of runc, under runc itself,
// Podman (--runtime), and Podman's hooks.d (hook-only mode); containerd
// and Docker where their daemon starts. klockd runs in the test process
// (enforcer/daemon with the suite's kernel backends) on a private socket
// that the runtime's hooks reach through KLOCK_SOCKET. Each test builds a
// busybox root filesystem, binds a host workdir at /workspace, and checks
// the container's exit, the workdir on the host byte for byte, and the
// verification log under the workdir's host path.
package container
